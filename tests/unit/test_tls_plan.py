"""TLS decisions (cluster.tls_plan, cluster.certs), table-driven, and the certificates
cluster.pki signs for them."""

from __future__ import annotations

import dataclasses

import pytest

from etcd_operator.core.cluster import builders, certs, naming, pki, tls_plan
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.certs import CertKind, CertView, TLSView
from etcd_operator.core.cluster.decision import plan
from etcd_operator.core.cluster.spec import ClusterSpec
from tests.unit.cluster_scenarios import NOW, RECORDED, M, decide_accepting, observed, recorded

TLS_SPEC = ClusterSpec.from_dict({"size": 3, "tls": {}})
PLAIN_SPEC = ClusterSpec.from_dict({"size": 3, "tls": {"enabled": False}})
CA_FP = "ca" * 32


def cert(fingerprint="leaf", issuer=CA_FP, age=0.0, lifetime=1000.0, **kw) -> CertView:
    return CertView(
        fingerprint=fingerprint,
        not_before=NOW - age,
        not_after=NOW - age + lifetime,
        issuer_fingerprint=issuer,
        trusted=(CA_FP,),
        **kw,
    )


def good_certs(**overrides) -> dict:
    views = {
        CertKind.CA: CertView(CA_FP, NOW - 10, NOW + 10**8, issuer_fingerprint=CA_FP, trusted=(CA_FP,), is_ca=True),
        CertKind.MEMBER: cert(dns_names=certs.member_dns_names("c", "ns"), common_name=certs.PEER_COMMON_NAME),
        CertKind.OPERATOR: cert(),
        CertKind.CLIENT: cert(),
    }
    views.update(overrides)
    return views


NEW = recorded(bootstrapped=False)  # what status records of a new cluster


def new_cluster(transport=None, views=None):
    """No member yet (status: NEW)."""
    return dataclasses.replace(observed([], leader=None), tls=TLSView(transport=transport, certs=views or {}))


# The acting spec of a TLS cluster whose peer port accepts the members' CN only.
TLS_RUNNING = dataclasses.replace(
    TLS_SPEC, tls=dataclasses.replace(TLS_SPEC.tls, peer_common_name=certs.PEER_COMMON_NAME)
)


def running(transport, views=None, peer_identity=certs.PEER_COMMON_NAME):
    """Three healthy members whose pods match the spec of their transport (with TLS, and by
    default, with the peer identity recorded)."""
    seen = observed([M(0), M(1), M(2)])
    tls_spec = TLS_RUNNING if peer_identity else TLS_SPEC
    current = builders.pod_spec_hash(tls_spec if transport == tls_plan.HTTPS else PLAIN_SPEC)
    tls = transport == tls_plan.HTTPS
    pods = {
        name: dataclasses.replace(
            pod, spec_hash=current, initial_cluster=(f"{name}={naming.peer_url('c', 'ns', name, tls)}")
        )
        for name, pod in seen.pods.items()
    }
    identity = peer_identity if transport == tls_plan.HTTPS else None
    return dataclasses.replace(
        seen, pods=pods, tls=TLSView(transport=transport, certs=views or {}, peer_identity=identity)
    )


@pytest.mark.parametrize(
    "spec, seen, st, expected",
    [
        # A new cluster takes spec.tls.
        (TLS_SPEC, new_cluster(), NEW, tls_plan.HTTPS),
        (PLAIN_SPEC, new_cluster(), NEW, tls_plan.HTTP),
        # Members and no record: created before TLS, plaintext, whatever the (defaulted) spec says.
        (TLS_SPEC, running(None), RECORDED, tls_plan.HTTP),
        (TLS_SPEC, running(None), NEW, tls_plan.HTTP),
    ],
)
def test_the_transport_is_recorded_first(spec, seen, st, expected):
    step = tls_plan.next_step(spec, st, seen, NOW)
    assert isinstance(step, a.RecordTransport) and step.transport == expected
    # A new Managed TLS cluster records its peer identity with it: no member runs to present another CN.
    new_managed_tls = expected == tls_plan.HTTPS and not seen.pods
    assert step.peer_identity == (certs.PEER_COMMON_NAME if new_managed_tls else None)
    assert isinstance(plan(spec, st, seen, NOW).action, a.RecordTransport)


def test_a_plaintext_cluster_is_not_switched_to_tls():
    seen = running(tls_plan.HTTP)
    decision = plan(TLS_SPEC, RECORDED, seen, NOW)
    assert not decision.acting_spec.tls.enabled
    accepted = next(c for c in decision.conditions if c.type == "SpecAccepted")
    assert (accepted.status, accepted.reason) == (False, "TLSMigrationUnsupported")
    assert not isinstance(decision.action, (a.RecordTransport, a.IssueCertificate, a.RollMember))


def test_a_legacy_cluster_keeps_its_pods_when_the_default_turns_tls_on():
    seen = running(None)
    decision = plan(TLS_SPEC, RECORDED, seen, NOW)
    assert not decision.acting_spec.tls.enabled
    assert builders.pod_spec_hash(decision.acting_spec) == builders.pod_spec_hash(PLAIN_SPEC)


def test_a_tls_cluster_is_not_switched_to_plaintext():
    seen = running(tls_plan.HTTPS, good_certs())
    decision = plan(PLAIN_SPEC, RECORDED, seen, NOW)
    assert decision.acting_spec.tls.enabled
    accepted = next(c for c in decision.conditions if c.type == "SpecAccepted")
    assert (accepted.status, accepted.reason) == (False, "TLSDisableUnsupported")


ALL = ("ca", "member", "operator", "client")


@pytest.mark.parametrize(
    "views, requested, kinds",
    [
        # A new cluster: its CA and every leaf, the CA first, in one step.
        ({}, {}, ALL),
        # Leaves left from an earlier CA (or a crash after some Secrets): the new CA signs them all.
        ({CertKind.MEMBER: cert(issuer="old"), CertKind.CLIENT: cert(issuer="old")}, {}, ALL),
        (good_certs(**{CertKind.CA: CertView("", 0, 0, problem="no tls.crt")}), {}, ALL),
        # A crash after the CA, or after some leaves: what is missing, in the same order.
        (
            good_certs(**{CertKind.MEMBER: None, CertKind.OPERATOR: None, CertKind.CLIENT: None}),
            {},
            ("member", "operator", "client"),
        ),
        (good_certs(**{CertKind.MEMBER: None, CertKind.CLIENT: None}), {}, ("member", "client")),
        (good_certs(**{CertKind.MEMBER: None}), {}, ("member",)),
        (good_certs(**{CertKind.OPERATOR: None}), {}, ("operator",)),
        (good_certs(**{CertKind.CLIENT: None}), {}, ("client",)),
        (good_certs(**{CertKind.MEMBER: cert(dns_names=("x",))}), {}, ("member",)),
        (good_certs(**{CertKind.OPERATOR: cert(issuer="other")}), {}, ("operator",)),
        (good_certs(**{CertKind.CLIENT: cert(problem="tls.key does not match tls.crt")}), {}, ("client",)),
        (good_certs(**{CertKind.OPERATOR: cert(age=900), CertKind.CLIENT: cert(age=900)}), {}, ("operator", "client")),
        # The step ends where the next pass would take a step of another kind: a requested CA
        # rotation is recorded before any leaf.
        ({}, {"CA": "r1"}, ("ca",)),
    ],
)
def test_certificates_are_issued_before_the_first_member_in_one_step(views, requested, kinds):
    seen = new_cluster(tls_plan.HTTPS, views)
    seen = dataclasses.replace(seen, tls=dataclasses.replace(seen.tls, requested=requested))
    step = tls_plan.next_step(TLS_SPEC, NEW, seen, NOW)
    assert isinstance(step, a.IssueCertificate) and step.kinds == kinds
    assert all(why in step.reason for _, why in step.certificates)


@pytest.mark.parametrize(
    "views, kind",
    [
        # With members running, one certificate per step, as before.
        (good_certs(**{CertKind.MEMBER: None, CertKind.CLIENT: None}), "member"),
        (good_certs(**{CertKind.OPERATOR: cert(age=900), CertKind.CLIENT: cert(age=900)}), "operator"),
        (good_certs(**{CertKind.CLIENT: cert(issuer="other")}), "client"),
    ],
)
def test_with_members_running_one_certificate_per_step(views, kind):
    step = tls_plan.next_step(TLS_SPEC, RECORDED, running(tls_plan.HTTPS, views), NOW)
    assert isinstance(step, a.IssueCertificate) and step.kinds == (kind,)


def test_the_first_member_starts_once_every_certificate_and_the_peer_identity_are_there():
    seen = new_cluster(tls_plan.HTTPS, good_certs())
    step = plan(TLS_SPEC, NEW, seen, NOW).action
    assert isinstance(step, a.RecordPeerIdentity) and step.common_name == certs.PEER_COMMON_NAME
    seen = dataclasses.replace(seen, tls=dataclasses.replace(seen.tls, peer_identity=certs.PEER_COMMON_NAME))
    decision = plan(TLS_SPEC, NEW, seen, NOW)
    assert isinstance(decision.action, a.BootstrapMembers)
    assert all(entry.split("=", 1)[1].startswith("https://") for entry in decision.action.initial_cluster.split(","))
    args = builders.etcd_args(decision.acting_spec, "c", "ns", "c-0", "t")
    assert f"--peer-cert-allowed-cn={certs.PEER_COMMON_NAME}" in args


# Peer identity: the peer port accepts the members' CN only. A cluster created before it runs
# a member certificate with another CN (c-member) and no --peer-cert-allowed-cn.
MEMBER_NAMES = certs.member_dns_names("c", "ns")
OLD_MEMBER = cert(fingerprint="old-leaf", dns_names=MEMBER_NAMES, common_name="c-member")
NEW_MEMBER = cert(fingerprint="new-leaf", dns_names=MEMBER_NAMES, common_name=certs.PEER_COMMON_NAME)


def before_the_peer_identity(member, served):
    """Three members running without the flag; `served`: the fingerprint each serves."""
    seen = running(tls_plan.HTTPS, good_certs(**{CertKind.MEMBER: member}), peer_identity=None)
    seen = dataclasses.replace(seen, tls=dataclasses.replace(seen.tls, served=served))
    current = builders.pod_spec_hash(plan(TLS_SPEC, RECORDED, seen, NOW).acting_spec)
    return dataclasses.replace(seen, pods={n: dataclasses.replace(p, spec_hash=current) for n, p in seen.pods.items()})


def test_a_cluster_moves_to_the_peer_identity_in_two_phases():
    """First the member certificate gets the peer CN, and nothing else happens until every
    member serves it (etcd reads the mounted files at each handshake); only then is the CN
    recorded, which rolls the members onto --peer-cert-allowed-cn one at a time. A member
    with the flag thus only ever meets peers that present the CN it checks."""
    seen = before_the_peer_identity(OLD_MEMBER, {"c-0": "old-leaf", "c-1": "old-leaf", "c-2": "old-leaf"})
    step = tls_plan.next_step(TLS_SPEC, RECORDED, seen, NOW)
    assert isinstance(step, a.IssueCertificate) and step.kinds == ("member",), step
    assert certs.PEER_COMMON_NAME in step.reason
    acting = plan(TLS_SPEC, RECORDED, seen, NOW).acting_spec
    args = builders.etcd_args(acting, "c", "ns", "c-0", "t")
    assert not any(arg.startswith("--peer-cert-allowed-cn") for arg in args)

    for served in (
        {"c-0": "old-leaf", "c-1": "old-leaf", "c-2": "old-leaf"},  # the kubelet has not refreshed the files yet
        {"c-0": "new-leaf", "c-1": "new-leaf", "c-2": "old-leaf"},  # one member still presents the old CN
        {"c-0": "new-leaf", "c-1": "new-leaf"},  # one member did not answer
        None,  # nothing observed
    ):
        waiting = before_the_peer_identity(NEW_MEMBER, served)
        assert tls_plan.next_step(TLS_SPEC, RECORDED, waiting, NOW) is None, served
        decision = decide_accepting(TLS_SPEC, waiting)
        assert decision.acting_spec.tls.peer_common_name is None
        assert not isinstance(decision.action, (a.RollMember, a.MoveLeader, a.RecordPeerIdentity))

    serving = before_the_peer_identity(NEW_MEMBER, {"c-0": "new-leaf", "c-1": "new-leaf", "c-2": "new-leaf"})
    step = tls_plan.next_step(TLS_SPEC, RECORDED, serving, NOW)
    assert isinstance(step, a.RecordPeerIdentity) and step.common_name == certs.PEER_COMMON_NAME

    recorded_ = dataclasses.replace(serving, tls=dataclasses.replace(serving.tls, peer_identity=certs.PEER_COMMON_NAME))
    decision = decide_accepting(TLS_SPEC, recorded_)
    assert decision.acting_spec.tls.peer_common_name == certs.PEER_COMMON_NAME
    assert builders.pod_spec_hash(decision.acting_spec) != builders.pod_spec_hash(
        plan(TLS_SPEC, RECORDED, serving, NOW).acting_spec
    )
    assert isinstance(decision.action, (a.RollMember, a.MoveLeader))  # one member at a time, leader last


def test_the_served_certificates_are_observed_until_the_peer_identity_is_recorded():
    """The observer dials every member for the certificate it serves (as during a rotation)
    while a Managed TLS cluster moves to the peer identity, and not after."""
    assert before_the_peer_identity(NEW_MEMBER, None).tls.awaits_peer_identity
    assert not running(tls_plan.HTTPS, good_certs()).tls.awaits_peer_identity
    assert not running(tls_plan.HTTP, peer_identity=None).tls.awaits_peer_identity
    provided = {CertKind.MEMBER: NEW_MEMBER, CertKind.OPERATOR: cert()}  # issuer Secrets observes no CA
    assert not running(tls_plan.HTTPS, provided, peer_identity=None).tls.awaits_peer_identity


def test_the_peer_identity_is_recorded_in_status():
    seen = running(tls_plan.HTTPS, good_certs())
    assert tls_plan.tls_status(TLS_SPEC, seen, None)["peerIdentity"] == certs.PEER_COMMON_NAME
    fresh = before_the_peer_identity(NEW_MEMBER, None)
    assert "peerIdentity" not in tls_plan.tls_status(TLS_SPEC, fresh, None)


def test_provided_certificates_get_no_peer_identity():
    """With issuer Secrets the operator does not know the members' CN: no flag is added."""
    provided = {"issuer": "Secrets", "memberSecretName": "m", "operatorSecretName": "o"}
    spec = ClusterSpec.from_dict({"size": 3, "tls": provided})
    member = cert(dns_names=certs.member_dns_names("c", "ns"), common_name="whatever-the-user-chose")
    seen = running(tls_plan.HTTPS, {CertKind.MEMBER: member, CertKind.OPERATOR: cert()}, peer_identity=None)
    assert tls_plan.next_step(spec, RECORDED, seen, NOW) is None
    assert plan(spec, RECORDED, seen, NOW).acting_spec.tls.peer_common_name is None


@pytest.mark.parametrize("ca", [None, CertView("", 0, 0, problem="no tls.crt")])
def test_a_ca_that_members_trust_is_never_replaced(ca):
    seen = running(tls_plan.HTTPS, good_certs(**{CertKind.CA: ca}))
    step = tls_plan.next_step(TLS_SPEC, RECORDED, seen, NOW)
    assert isinstance(step, a.Wait) and "does not replace a CA" in step.reason


def test_leaves_are_renewed_at_the_configured_fraction():
    spec = ClusterSpec.from_dict({"tls": {"renewAtFraction": 0.5}})
    young = running(tls_plan.HTTPS, good_certs(**{CertKind.OPERATOR: cert(age=499)}))
    assert tls_plan.next_step(spec, RECORDED, young, NOW) is None
    due = running(tls_plan.HTTPS, good_certs(**{CertKind.OPERATOR: cert(age=500)}))
    step = tls_plan.next_step(spec, RECORDED, due, NOW)
    assert isinstance(step, a.IssueCertificate) and step.kinds == ("operator",) and "renewing" in step.reason


def test_provided_secrets_are_waited_for_not_issued():
    spec = ClusterSpec.from_dict({"tls": {"issuer": "Secrets", "memberSecretName": "m", "operatorSecretName": "o"}})
    seen = new_cluster(tls_plan.HTTPS, {CertKind.MEMBER: None, CertKind.OPERATOR: None})
    step = tls_plan.next_step(spec, NEW, seen, NOW)
    assert isinstance(step, a.Wait) and "Secret m" in step.reason
    assert certs.secret_name(spec, "c", CertKind.MEMBER) == "m"
    assert certs.kinds_to_observe(spec) == (CertKind.MEMBER, CertKind.OPERATOR)


def test_tls_members_get_https_urls_and_client_certificate_auth():
    pod = builders.member_pod(TLS_SPEC, "c", "ns", "c-0", None, "c-0=https://x", "new", "tok")
    args = pod["spec"]["containers"][0]["args"]
    assert "--client-cert-auth=true" in args and "--peer-client-cert-auth=true" in args
    assert "--listen-client-urls=https://$(POD_IP):2379,https://127.0.0.1:2379" in args
    assert "--initial-advertise-peer-urls=https://c-0.c-peer.ns.svc:2380" in args
    assert any(v.get("secret", {}).get("secretName") == "c-member-tls" for v in pod["spec"]["volumes"])
    plain = builders.member_pod(PLAIN_SPEC, "c", "ns", "c-0", None, "c-0=http://x", "new", "tok")
    assert not any("cert" in arg for arg in plain["spec"]["containers"][0]["args"])


def test_issued_certificates_chain_to_the_ca_and_renewal_keeps_the_key():
    ca = pki.new_ca(certs.request_for(TLS_SPEC, "c", "ns", CertKind.CA), NOW)
    member = pki.issue_leaf(certs.request_for(TLS_SPEC, "c", "ns", CertKind.MEMBER), ca, None, NOW)
    ca_view, member_view = pki.describe(ca), pki.describe(member)
    assert ca_view.is_ca and member_view.issuer_fingerprint == ca_view.fingerprint
    assert set(certs.member_dns_names("c", "ns")) <= set(member_view.dns_names)
    assert member_view.problem is None
    renewed = pki.issue_leaf(certs.request_for(TLS_SPEC, "c", "ns", CertKind.MEMBER), ca, member, NOW + 10)
    assert renewed["tls.key"] == member["tls.key"] and renewed["tls.crt"] != member["tls.crt"]
    mismatched = pki.describe(
        {**member, "tls.key": pki.new_ca(certs.request_for(TLS_SPEC, "c", "ns", CertKind.CA), NOW)["tls.key"]}
    )
    assert mismatched.problem == "tls.key does not match tls.crt"


def test_only_the_member_certificate_carries_the_peer_identity():
    """The peer port accepts CN etcd-member:peer only: the member certificate has it, and no
    other certificate the operator signs (operator, client Secret, a spec.auth user) can."""
    ca = pki.new_ca(certs.request_for(TLS_SPEC, "c", "ns", CertKind.CA), NOW)
    member = pki.describe(pki.issue_leaf(certs.request_for(TLS_SPEC, "c", "ns", CertKind.MEMBER), ca, None, NOW))
    assert member.common_name == certs.PEER_COMMON_NAME
    for kind in (CertKind.OPERATOR, CertKind.CLIENT):
        issued = pki.issue_leaf(certs.request_for(TLS_SPEC, "c", "ns", kind), ca, None, NOW)
        assert pki.describe(issued).common_name != certs.PEER_COMMON_NAME
    with pytest.raises(ValueError, match="peer identity"):
        pki.issue_leaf(certs.user_request(TLS_SPEC, certs.PEER_COMMON_NAME), ca, None, NOW)


def test_the_schema_refuses_a_user_named_as_the_peer_identity():
    """A spec.auth user's name is its certificate's CN: the name pattern cannot spell the peer
    identity (no ':'), and a CEL rule refuses it by name as well."""
    import pathlib
    import re

    import yaml

    crd = yaml.safe_load((pathlib.Path(__file__).resolve().parents[2] / "crds" / "etcdclusters.yaml").read_text())
    users = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["auth"][
        "properties"
    ]["users"]["items"]
    assert re.fullmatch(users["properties"]["name"]["pattern"], certs.PEER_COMMON_NAME) is None
    assert any(
        f"self.name != '{certs.PEER_COMMON_NAME}'" in rule["rule"] and "peer identity" in rule["message"]
        for rule in users["x-kubernetes-validations"]
    )


def test_the_peer_port_accepts_the_member_cn_only_once_recorded():
    recorded_spec = TLS_RUNNING
    args = builders.etcd_args(recorded_spec, "c", "ns", "c-0", "t")
    assert args.count(f"--peer-cert-allowed-cn={certs.PEER_COMMON_NAME}") == 1
    assert "--peer-client-cert-auth=true" in args
    assert not any(a.startswith("--peer-cert-allowed") for a in builders.etcd_args(TLS_SPEC, "c", "ns", "c-0", "t"))
    # Recording it changes the pod spec hash: that is what rolls the members onto it.
    assert builders.pod_spec_hash(recorded_spec) != builders.pod_spec_hash(TLS_SPEC)


NEW_FP = "nw" * 32


def rotating(phase, ca_fp, trusted, leaf_issuer, served_fp="leaf", pods_follow=True, next_ca=True):
    """Three running members in a CA rotation (old CA CA_FP -> NEW_FP) at `phase`."""
    ca = CertView(ca_fp, NOW - 10, NOW + 10**8, issuer_fingerprint=ca_fp, trusted=trusted, is_ca=True)

    def leaf(**kw):
        return CertView("leaf", NOW, NOW + 1000, issuer_fingerprint=leaf_issuer, trusted=trusted, **kw)

    views = {
        CertKind.CA: ca,
        CertKind.MEMBER: leaf(dns_names=certs.member_dns_names("c", "ns"), common_name=certs.PEER_COMMON_NAME),
        CertKind.OPERATOR: leaf(),
        CertKind.CLIENT: leaf(),
    }
    seen = running(tls_plan.HTTPS, views)
    acting = plan(TLS_SPEC, RECORDED, seen, NOW).acting_spec
    current = builders.pod_spec_hash(acting) if pods_follow else "before-the-bundle-changed"
    pods = {n: dataclasses.replace(p, spec_hash=current) for n, p in seen.pods.items()}
    next_view = CertView(NEW_FP, NOW, NOW + 10**8, issuer_fingerprint=NEW_FP, trusted=trusted, is_ca=True)
    tls = TLSView(
        tls_plan.HTTPS,
        views,
        next_ca=next_view if next_ca else None,
        rotation=certs.Rotation(certs.ROTATE_CA, "r1", phase, (CA_FP,)),
        served={n: served_fp for n in pods},
        peer_identity=certs.PEER_COMMON_NAME,
    )
    return dataclasses.replace(seen, pods=pods, tls=tls)


BOTH = (CA_FP, NEW_FP)


@pytest.mark.parametrize(
    "seen, expected",
    [
        # Trust: a new CA next to the old, the bundle copied into each leaf Secret, members
        # restarted by the planner (outdated pod hash), then the next phase.
        (rotating(certs.PHASE_TRUST, CA_FP, (CA_FP,), CA_FP, next_ca=False), ("UpdateCASecret", "add-next")),
        (rotating(certs.PHASE_TRUST, CA_FP, BOTH, CA_FP, pods_follow=False), None),
        (rotating(certs.PHASE_TRUST, CA_FP, BOTH, CA_FP), ("RecordRotation", certs.PHASE_ISSUE)),
        # Issue: the new CA signs, leaves are reissued, and the phase ends once members serve them.
        (rotating(certs.PHASE_ISSUE, CA_FP, BOTH, CA_FP), ("UpdateCASecret", "promote-next")),
        (rotating(certs.PHASE_ISSUE, NEW_FP, BOTH, CA_FP), ("IssueCertificate", "member")),
        (rotating(certs.PHASE_ISSUE, NEW_FP, BOTH, NEW_FP, served_fp="old-leaf"), None),
        (rotating(certs.PHASE_ISSUE, NEW_FP, BOTH, NEW_FP), ("RecordRotation", certs.PHASE_DROP)),
        # Drop: the old CA leaves the bundle, members restart, done.
        (rotating(certs.PHASE_DROP, NEW_FP, BOTH, NEW_FP), ("UpdateCASecret", "drop-old")),
        (rotating(certs.PHASE_DROP, NEW_FP, (NEW_FP,), NEW_FP, pods_follow=False), None),
        (rotating(certs.PHASE_DROP, NEW_FP, (NEW_FP,), NEW_FP), ("RecordRotation", None)),
    ],
)
def test_ca_rotation_phases(seen, expected):
    decision = decide_accepting(TLS_SPEC, seen)
    step = tls_plan.next_step(decision.acting_spec, RECORDED, seen, NOW)
    if expected is None:
        assert step is None
        if any(p.spec_hash == "before-the-bundle-changed" for p in seen.pods.values()):
            assert isinstance(decision.action, (a.RollMember, a.MoveLeader))  # one member at a time, leader last
        return
    kind, detail = expected
    assert step.kind == kind, step
    if kind == "UpdateCASecret":
        assert step.change == detail
    elif kind == "IssueCertificate":
        assert step.kinds == (detail,)
    else:
        assert (step.rotation.phase if step.rotation else None) == detail


def test_the_trust_bundle_reaches_every_leaf_secret():
    seen = rotating(certs.PHASE_TRUST, CA_FP, (CA_FP,), CA_FP)
    ca = dataclasses.replace(seen.tls.cert(CertKind.CA), trusted=BOTH)
    seen = dataclasses.replace(seen, tls=dataclasses.replace(seen.tls, certs={**seen.tls.certs, CertKind.CA: ca}))
    step = tls_plan.next_step(TLS_SPEC, RECORDED, seen, NOW)
    assert isinstance(step, a.SyncTrustBundle) and step.certificate == "member"


def test_a_changed_trust_bundle_restarts_members_through_the_pod_hash():
    before = running(tls_plan.HTTPS, good_certs())
    after_certs = {k: dataclasses.replace(v, trusted=BOTH) for k, v in good_certs().items()}
    after = running(tls_plan.HTTPS, after_certs)
    assert builders.pod_spec_hash(plan(TLS_SPEC, RECORDED, before, NOW).acting_spec) != builders.pod_spec_hash(
        plan(TLS_SPEC, RECORDED, after, NOW).acting_spec
    )


def test_a_requested_rotation_is_recorded_before_it_starts():
    seen = running(tls_plan.HTTPS, good_certs())
    seen = dataclasses.replace(
        seen, tls=dataclasses.replace(seen.tls, requested={"CA": "r1", "Leaves": "l1"}, rotated={"Leaves": "l1"})
    )
    step = tls_plan.next_step(TLS_SPEC, RECORDED, seen, NOW)
    assert isinstance(step, a.RecordRotation) and step.rotation.kind == "CA" and step.rotation.replaced == (CA_FP,)
    done = dataclasses.replace(seen, tls=dataclasses.replace(seen.tls, rotated={"Leaves": "l1", "CA": "r1"}))
    assert tls_plan.next_step(TLS_SPEC, RECORDED, done, NOW) is None


def test_tls_status_has_no_nulls_unless_a_step_clears_a_field():
    seen = running(tls_plan.HTTPS, good_certs())
    status = tls_plan.tls_status(TLS_SPEC, seen, None)
    assert None not in status.values() and status["transport"] == "https"
    assert "fingerprint" in status["certificates"]["member"] and "tls.key" not in str(status)
    cleared = tls_plan.tls_status(TLS_SPEC, seen, {"rotation": None, "rotated": {"CA": "r1"}})
    assert cleared["rotation"] is None and cleared["rotated"] == {"CA": "r1"}


def test_a_settled_tls_cluster_is_not_taken_for_a_roll():
    """The pod spec hash of a TLS cluster covers what the operator resolves beyond the spec
    (the trusted CAs): the last good hash is recorded as the members run it, so a settled
    cluster is not seen as rolling (which would gate and roll back ordinary failures)."""
    from etcd_operator.core.cluster import roll

    raw = {"size": 3, "tls": {}}
    seen = running(tls_plan.HTTPS, good_certs())
    desired = builders.pod_spec_hash(plan(TLS_SPEC, RECORDED, seen, NOW, stored_spec=raw).acting_spec)
    seen = dataclasses.replace(seen, pods={n: dataclasses.replace(p, spec_hash=desired) for n, p in seen.pods.items()})
    settled = plan(TLS_SPEC, RECORDED, seen, NOW, stored_spec=raw)
    assert settled.rollout.last_good_spec == raw and settled.rollout.last_good_hash == desired
    st = recorded(rollout=settled.rollout)
    assert not roll.rolling(
        st.rollout, builders.pod_spec_hash(plan(TLS_SPEC, st, seen, NOW, stored_spec=raw).acting_spec)
    )


def test_member_certificates_carry_the_cluster_domain_the_operator_is_given():
    """etcd checks a joining peer's certificate against the name its address resolves back
    to, which ends in the Kubernetes cluster's domain (CLUSTER_DOMAIN)."""
    names = certs.member_dns_names("c", "ns", "k8s.example")
    assert "*.c-peer.ns.svc.k8s.example" in names and "c-client.ns.svc.k8s.example" in names
    assert not any(n.endswith("cluster.local") for n in names)
    request = certs.request_for(TLS_SPEC, "c", "ns", CertKind.MEMBER, "k8s.example")
    assert set(request.dns_names) == set(names)


def test_a_member_certificate_without_the_cluster_domain_is_reissued_once():
    seen = dataclasses.replace(running(tls_plan.HTTPS, good_certs()), cluster_domain="k8s.example")
    step = tls_plan.next_step(TLS_SPEC, RECORDED, seen, NOW)
    assert isinstance(step, a.IssueCertificate) and step.kinds == ("member",), step
    assert "every member and Service name" in step.reason
    member = cert(dns_names=certs.member_dns_names("c", "ns", "k8s.example"), common_name=certs.PEER_COMMON_NAME)
    reissued = dataclasses.replace(seen.tls, certs=good_certs(**{CertKind.MEMBER: member}))
    assert tls_plan.next_step(TLS_SPEC, RECORDED, dataclasses.replace(seen, tls=reissued), NOW) is None


@pytest.mark.parametrize(
    "value, domain", [("", "cluster.local"), ("Cluster.Local.", "cluster.local"), ("k8s.example", "k8s.example")]
)
def test_the_cluster_domain_setting(value, domain):
    from etcd_operator.runtime.config import cluster_domain_setting

    assert cluster_domain_setting(value) == domain


@pytest.mark.parametrize("value", ["*.example", "a..b", "under_score.local", "-x.local"])
def test_a_cluster_domain_that_is_no_dns_domain_is_refused(value):
    from etcd_operator.runtime.config import cluster_domain_setting

    with pytest.raises(ValueError, match="CLUSTER_DOMAIN"):
        cluster_domain_setting(value)
