"""TLS decisions for a cluster: which transport it serves, whether a spec.tls change can be
made, and the next certificate to issue or renew. Pure.

Invariants (tests/unit/test_tls_plan.py):
- a cluster keeps the transport it was created with; a cluster with members and no
  recorded transport predates TLS and is plaintext, whatever spec.tls says;
- the transport is recorded before anything else is done, so a cluster created with TLS is
  never mistaken for one that predates it (nor the other way round), restores included;
- a CA that running members trust is never replaced by a new one: a missing or unreadable
  CA Secret while members exist is a wait, not an issue;
- a certificate Secret of the operator's name that is not its own (cluster/ownership.py) is
  never written, adopted or read for a certificate: nothing is issued while one exists;
- leaves are issued only from the CA in the CA Secret, and renewed once
  spec.tls.renewAtFraction of their lifetime has passed;
- before any member runs, one step issues every certificate the passes would otherwise
  issue one at a time, in the same order (a new cluster's CA and leaves); with members
  running, one certificate per step;
- the peer port is restricted to the members' CN (status.tls.peerIdentity, which adds
  --peer-cert-allowed-cn and so rolls the members) only once the member certificate carries
  that CN and every member serves it: a member that refuses other CNs never meets a peer
  still presenting an older member certificate.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from etcd_operator.core.cluster import builders, ownership
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.certs import (
    LEAVES,
    PEER_COMMON_NAME,
    PHASE_DROP,
    PHASE_ISSUE,
    PHASE_RENEW,
    PHASE_TRUST,
    ROTATE_CA,
    ROTATE_LEAVES,
    CertKind,
    CertView,
    Rotation,
    member_dns_names,
    request_for,
    secret_name,
)
from etcd_operator.core.cluster.observed import Observed
from etcd_operator.core.cluster.recorded import ClusterStatus
from etcd_operator.core.cluster.spec import ISSUER_MANAGED, ClusterSpec, SpecProblem
from etcd_operator.core.timefmt import format_time

HTTPS = "https"
HTTP = "http"


def transport(status: ClusterStatus, observed: Observed) -> str | None:
    """The transport the cluster serves: recorded, or plaintext for a cluster that has
    members but no record (it predates TLS); None for a cluster not created yet."""
    if observed.tls.transport:
        return observed.tls.transport
    if status.bootstrapped or observed.pods:
        return HTTP
    return None


def transport_problem(spec: ClusterSpec, status: ClusterStatus, observed: Observed) -> SpecProblem | None:
    serving = transport(status, observed)
    if serving == HTTP and spec.tls.enabled:
        return SpecProblem(
            "TLSMigrationUnsupported",
            "spec.tls.enabled is true, but this cluster was created without TLS and serves plaintext; the operator "
            "does not switch a running cluster to TLS, and leaves it as it is. Set spec.tls.enabled: false, or "
            "restore a backup into a new cluster, which gets TLS",
        )
    if serving == HTTPS and not spec.tls.enabled:
        return SpecProblem(
            "TLSDisableUnsupported",
            "spec.tls.enabled is false, but this cluster serves TLS; the operator does not switch a running cluster "
            "to plaintext, and keeps TLS. Set spec.tls.enabled: true",
        )
    return None


def serves_tls(spec: ClusterSpec, status: ClusterStatus, observed: Observed) -> bool:
    """Whether the cluster acted on serves TLS: what runs, or the spec for a new cluster."""
    serving = transport(status, observed)
    return spec.tls.enabled if serving is None else serving == HTTPS


def serves_tls_observed(status: ClusterStatus, observed: Observed) -> bool:
    """Whether the members run (or, once recorded, are created) with TLS: for peer URLs."""
    return transport(status, observed) == HTTPS


def next_step(spec: ClusterSpec, status: ClusterStatus, observed: Observed, now: float) -> a.Step | None:
    """The certificate step to take before anything else, if any. `spec` is the acting spec."""
    step = _one_step(spec, status, observed, now)
    if isinstance(step, a.IssueCertificate) and not observed.pods:
        return _with_the_issues_that_follow(spec, status, observed, now, step)
    return step


def _with_the_issues_that_follow(
    spec: ClusterSpec, status: ClusterStatus, observed: Observed, now: float, first: a.IssueCertificate
) -> a.IssueCertificate:
    """Before any member runs, one step issues what the next passes would issue one by one:
    the same certificates in the same order, each planned as if those before it were in
    place. It stops at the first step of another kind, or one that repeats a certificate."""
    certificates = list(first.certificates)
    seen = observed
    while True:
        seen = _as_issued(spec, seen, now, CertKind(certificates[-1][0]))
        step = _one_step(spec, status, seen, now)
        if not isinstance(step, a.IssueCertificate) or set(step.kinds) & {kind for kind, _ in certificates}:
            break
        certificates += step.certificates
    if len(certificates) == 1:
        return first
    return a.IssueCertificate("; ".join(why for _, why in certificates), tuple(certificates))


def _as_issued(spec: ClusterSpec, observed: Observed, now: float, kind: CertKind) -> Observed:
    """`observed` as the next pass would see it once `kind` is issued (cluster.pki): a
    placeholder fingerprint, signed by the CA in place, trusting its bundle."""
    tls = observed.tls
    request = request_for(spec, observed.cluster, observed.namespace, kind, observed.cluster_domain)
    if kind == CertKind.CA:
        fingerprint = f"issued in this step: {kind.value}"
        view = CertView(
            fingerprint, now, now + request.lifetime, issuer_fingerprint=fingerprint, trusted=(fingerprint,), is_ca=True
        )
    else:
        ca = tls.cert(CertKind.CA)
        if ca is None:
            raise ValueError(f"{kind.value} is issued under the CA, and there is none yet")
        view = CertView(
            f"issued in this step: {kind.value}",
            now,
            now + request.lifetime,
            dns_names=request.dns_names,
            issuer_fingerprint=ca.fingerprint,
            trusted=ca.trusted,
            common_name=request.common_name,
        )
    return dataclasses.replace(observed, tls=dataclasses.replace(tls, certs={**tls.certs, kind: view}))


def _issue(reason: str, kind: CertKind) -> a.IssueCertificate:
    return a.IssueCertificate(reason, ((kind.value, reason),))


def _one_step(spec: ClusterSpec, status: ClusterStatus, observed: Observed, now: float) -> a.Step | None:
    if observed.tls.transport is None:
        if transport(status, observed) == HTTP:
            return a.RecordTransport("recording that this cluster, created before TLS, serves plaintext", HTTP)
        if spec.tls.enabled:
            if spec.tls.issuer == ISSUER_MANAGED:  # no member runs yet: none presents another CN
                return a.RecordTransport(
                    f"recording that this new cluster serves TLS, its peer port to CN {PEER_COMMON_NAME} only",
                    HTTPS,
                    PEER_COMMON_NAME,
                )
            return a.RecordTransport("recording that this new cluster serves TLS", HTTPS)
        return a.RecordTransport("recording that this new cluster serves plaintext (spec.tls.enabled: false)", HTTP)
    if not spec.tls.enabled:
        return None
    if spec.tls.issuer != ISSUER_MANAGED:
        return _wait_for_provided_secrets(spec, observed)
    if observed.tls.foreign:
        name, why = min(observed.tls.foreign.items())
        return a.Wait(f"{ownership.describe(f'Secret {name}', why)}; no certificate is issued or renewed until then")
    ca = observed.tls.cert(CertKind.CA)
    if ca is None or ca.problem or not ca.is_ca:
        name = secret_name(spec, observed.cluster, CertKind.CA)
        if observed.pods:
            what = "is missing" if ca is None else f"is unusable ({ca.problem or 'not a CA'})"
            return a.Wait(
                f"the CA Secret {name} {what} while members run; the operator does not replace a CA the "
                f"members trust. Restore the Secret from your backup of it"
            )
        return _issue(f"creating the cluster's CA in Secret {name}", CertKind.CA)
    rotation = observed.tls.rotation
    if rotation is None:
        step = _start_rotation(observed, ca)
        if step:
            return step
    elif rotation.kind == ROTATE_CA:
        step = _ca_secret_step(rotation, ca, observed)
        if step:
            return step
    for kind in LEAVES:
        name = secret_name(spec, observed.cluster, kind)
        reason = _leaf_reason(spec, observed, now, kind, ca, rotation)
        if reason == SYNC_TRUST:
            return a.SyncTrustBundle(f"{name}: taking the CA Secret's trust bundle", kind.value)
        if reason:
            return _issue(f"{name}: {reason}", kind)
    if rotation is not None:
        return _advance(spec, observed, rotation)
    return _peer_identity_step(observed)


SYNC_TRUST = "sync-trust"


def _start_rotation(observed: Observed, ca: CertView) -> a.Step | None:
    request = observed.tls.pending_request(ROTATE_CA)
    if request:
        return a.RecordRotation(
            f"CA rotation {request!r} requested; phase {PHASE_TRUST}",
            Rotation(ROTATE_CA, request, PHASE_TRUST, (ca.fingerprint,)),
        )
    request = observed.tls.pending_request(ROTATE_LEAVES)
    if request:
        leaves = tuple(c.fingerprint for k in LEAVES if (c := observed.tls.cert(k)) is not None)
        return a.RecordRotation(
            f"leaf rotation {request!r} requested", Rotation(ROTATE_LEAVES, request, PHASE_RENEW, leaves)
        )
    return None


def _ca_secret_step(rotation: Rotation, ca: CertView, observed: Observed) -> a.Step | None:
    old = set(rotation.replaced)
    next_ca = observed.tls.next_ca
    if (
        rotation.phase == PHASE_TRUST
        and ca.fingerprint in old
        and (next_ca is None or next_ca.problem or next_ca.fingerprint not in ca.trusted)
    ):
        return a.UpdateCASecret("adding a new CA, trusted next to the old one", "add-next")
    if rotation.phase == PHASE_ISSUE and ca.fingerprint in old:
        return a.UpdateCASecret("the new CA signs from now on", "promote-next")
    if rotation.phase == PHASE_DROP and old & set(ca.trusted):
        return a.UpdateCASecret("dropping the old CA from the trust bundle", "drop-old")
    return None


def _advance(spec: ClusterSpec, observed: Observed, rotation: Rotation) -> a.Step | None:
    """The rotation's next phase once every member has taken this one; None while members
    are rolled (the planner restarts outdated members one at a time, leader last)."""
    rolled = _members_follow(spec, observed)
    serving = _members_serve_current_leaf(observed)
    if rotation.kind == ROTATE_LEAVES:
        if serving:
            return a.RecordRotation(
                f"leaf rotation {rotation.request!r} done: every member serves its new certificate",
                None,
                (ROTATE_LEAVES, rotation.request),
            )
        return None
    if rotation.phase == PHASE_TRUST and rolled:
        return a.RecordRotation(
            f"every member trusts the new CA; phase {PHASE_ISSUE}", dataclasses.replace(rotation, phase=PHASE_ISSUE)
        )
    if rotation.phase == PHASE_ISSUE and rolled and serving:
        return a.RecordRotation(
            f"every member serves a certificate of the new CA; phase {PHASE_DROP}",
            dataclasses.replace(rotation, phase=PHASE_DROP),
        )
    if rotation.phase == PHASE_DROP and rolled and serving:
        return a.RecordRotation(
            f"CA rotation {rotation.request!r} done: the old CA is trusted no more", None, (ROTATE_CA, rotation.request)
        )
    return None


def _peer_identity_step(observed: Observed) -> a.Step | None:
    """Records the members' CN as the only one the peer port accepts, once every member
    serves the member certificate that carries it (the kubelet refreshes a mounted Secret
    within about a minute, and etcd reads the files at each handshake). None until then."""
    if observed.tls.peer_identity == PEER_COMMON_NAME:
        return None
    member = observed.tls.cert(CertKind.MEMBER)
    if member is None or member.problem or member.common_name != PEER_COMMON_NAME:
        return None  # the leaves above reissue it first
    if observed.pods and not _members_serve_current_leaf(observed):
        return None
    return a.RecordPeerIdentity(
        f"every member serves a certificate with CN {PEER_COMMON_NAME}; the peer port accepts only that CN "
        f"from now on (members are restarted one at a time with --peer-cert-allowed-cn)",
        PEER_COMMON_NAME,
    )


def _members_follow(spec: ClusterSpec, observed: Observed) -> bool:
    """Every member runs in a pod built for the current trust bundle."""
    desired = builders.pod_spec_hash(spec)
    return bool(observed.pods) and all(p.spec_hash == desired and not p.deleting for p in observed.pods.values())


def _members_serve_current_leaf(observed: Observed) -> bool:
    member = observed.tls.cert(CertKind.MEMBER)
    served = observed.tls.served
    if member is None or served is None:
        return False
    return set(served) >= set(observed.pods) and all(served.get(name) == member.fingerprint for name in observed.pods)


def _leaf_reason(
    spec: ClusterSpec, observed: Observed, now: float, kind: CertKind, ca: CertView, rotation: Rotation | None
) -> str | None:
    cert = observed.tls.cert(kind)
    if cert is None:
        return "issuing"
    if cert.problem:
        return f"reissuing ({cert.problem})"
    if cert.issuer_fingerprint != ca.fingerprint:
        return "reissuing from the cluster's CA (signed by another)"
    wanted_names = member_dns_names(observed.cluster, observed.namespace, observed.cluster_domain)
    if kind == CertKind.MEMBER and not set(wanted_names) <= set(cert.dns_names):
        return "reissuing with every member and Service name"
    if kind == CertKind.MEMBER and cert.common_name != PEER_COMMON_NAME:
        return f"reissuing with the members' peer identity (CN {PEER_COMMON_NAME})"
    if rotation is not None and rotation.kind == ROTATE_LEAVES and cert.fingerprint in rotation.replaced:
        return f"renewing (rotation {rotation.request!r})"
    if cert.renewal_due(spec.tls.renew_at_fraction, now):
        return f"renewing ({spec.tls.renew_at_fraction:.0%} of its lifetime passed)"
    if set(cert.trusted) != set(ca.trusted):
        return SYNC_TRUST
    return None


def _wait_for_provided_secrets(spec: ClusterSpec, observed: Observed) -> a.Step | None:
    if observed.pods:
        return None  # members run on the files they mounted; a broken Secret shows in status
    for kind in (CertKind.MEMBER, CertKind.OPERATOR):
        cert = observed.tls.cert(kind)
        if cert is None or cert.problem:
            what = "to exist" if cert is None else f"to be usable ({cert.problem})"
            return a.Wait(
                f"waiting for Secret {secret_name(spec, observed.cluster, kind)} {what} (tls.crt, tls.key, ca.crt)"
            )
    return None


def tls_status(spec: ClusterSpec, observed: Observed, patch: dict[str, Any] | None) -> dict[str, Any] | None:
    """status.tls: the transport, the rotation in flight and those done, and per certificate
    its fingerprint prefix and expiry. `patch`: what this pass's step recorded."""
    patch = patch or {}
    serving = patch.get("transport") or observed.tls.transport
    if serving is None:
        return None
    rotation = observed.tls.rotation.to_dict() if observed.tls.rotation else None
    certificates = {
        kind.value: {
            "secretName": secret_name(spec, observed.cluster, kind),
            "fingerprint": cert.fingerprint[:16],
            "notAfter": format_time(cert.not_after),
        }
        for kind, cert in sorted(observed.tls.certs.items())
        if cert is not None and not cert.problem
    }
    status = {
        "transport": serving,
        "certificates": certificates,
        "rotation": rotation,
        "rotated": dict(observed.tls.rotated) or None,
        "peerIdentity": observed.tls.peer_identity,
    }
    # Absent rather than null, as the API server stores it (so an unchanged status is not
    # written again); a null in this pass's patch still clears a finished rotation.
    status = {k: v for k, v in status.items() if v is not None}
    status.update(patch)
    return status
