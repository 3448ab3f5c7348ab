"""A CA rotation never leaves a window in which a new member would join with certificates the
running members refuse, or refuse theirs. The rotation is run pass by pass through the real
planner against a model of what etcd holds: each running member trusts the bundle its etcd
started with (etcd reads its trusted CAs only at start) and serves the leaf its mounted
Secret held at the last kubelet sync (etcd reads its certificate at every handshake, the
kubelet updates a mounted Secret some time after the Secret changes). Before every pass the
planner is also asked, with one member more in the spec, whether it would add a member now;
whenever it would:
- every running member trusts the CA that signed the new member's certificate, and
- the new member's bundle (the member Secret's ca.crt) holds the CA of every leaf the
  running members serve.
"""

from __future__ import annotations

import dataclasses

import pytest

from etcd_operator.core.cluster import builders, certs, naming
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.certs import CertKind, CertView, Rotation, TLSView
from etcd_operator.core.cluster.spec import ClusterSpec
from tests.unit.cluster_scenarios import NOW, M, decide_accepting, observed

OLD, NEW = "o" * 64, "n" * 64
MEMBERS = ("c-0", "c-1", "c-2")


def spec(size: int) -> ClusterSpec:
    return ClusterSpec.from_dict({"size": size, "tls": {}})


@dataclasses.dataclass
class Leaf:
    fingerprint: str
    issuer: str
    bundle: tuple[str, ...]


@dataclasses.dataclass
class Running:
    """One member as etcd runs it: the pod hash it was built with, the CAs its etcd started
    with, and the leaf it serves (the mounted Secret at the last kubelet sync)."""

    spec_hash: str
    trusts: tuple[str, ...]
    serves: Leaf


class Model:
    def __init__(self, pod_hash: str):
        self.ca, self.ca_bundle, self.next_ca = OLD, (OLD,), None
        self.leaves = {k: Leaf(f"{k.value}-1", OLD, (OLD,)) for k in certs.LEAVES}
        self.issued = 1
        self.rotation: Rotation | None = None
        self.rotated: dict[str, str] = {}
        self.leader = 0
        self.members = {name: Running(pod_hash, (OLD,), self.leaves[CertKind.MEMBER]) for name in MEMBERS}

    def observed(self):
        seen = observed([M(0), M(1), M(2)], leader=self.leader)
        pods = {
            name: dataclasses.replace(
                pod,
                spec_hash=self.members[name].spec_hash,
                initial_cluster=f"{name}={naming.peer_url('c', 'ns', name, True)}",
            )
            for name, pod in seen.pods.items()
        }
        views = {
            CertKind.CA: CertView(
                self.ca, NOW - 10, NOW + 10**8, issuer_fingerprint=self.ca, trusted=self.ca_bundle, is_ca=True
            )
        }
        for kind, leaf in self.leaves.items():
            names = certs.member_dns_names("c", "ns") if kind == CertKind.MEMBER else ()
            # A cluster on the members' peer identity already (its move is test_tls_plan's concern).
            common_name = certs.PEER_COMMON_NAME if kind == CertKind.MEMBER else ""
            views[kind] = CertView(
                leaf.fingerprint, NOW, NOW + 10**6, names, leaf.issuer, leaf.bundle, common_name=common_name
            )
        next_view = None
        if self.next_ca:
            next_view = CertView(
                self.next_ca, NOW, NOW + 10**8, issuer_fingerprint=self.next_ca, trusted=self.ca_bundle, is_ca=True
            )
        tls = TLSView(
            "https",
            views,
            next_ca=next_view,
            rotation=self.rotation,
            requested={certs.ROTATE_CA: "r1"},
            rotated=dict(self.rotated),
            served={name: m.serves.fingerprint for name, m in self.members.items()},
            peer_identity=certs.PEER_COMMON_NAME,
        )
        return dataclasses.replace(seen, pods=pods, tls=tls)

    def apply(self, step: a.Step, acting: ClusterSpec) -> None:
        if isinstance(step, a.RecordRotation):
            self.rotation = step.rotation
            if step.finished:
                self.rotated[step.finished[0]] = step.finished[1]
        elif isinstance(step, a.UpdateCASecret):
            if step.change == "add-next":
                self.next_ca, self.ca_bundle = NEW, (OLD, NEW)
            elif step.change == "promote-next":
                self.ca, self.next_ca = NEW, None
            elif step.change == "drop-old":
                self.ca_bundle = (self.ca,)
        elif isinstance(step, a.SyncTrustBundle):
            leaf = self.leaves[CertKind(step.certificate)]
            self.leaves[CertKind(step.certificate)] = dataclasses.replace(leaf, bundle=self.ca_bundle)
        elif isinstance(step, a.IssueCertificate):
            for kind in step.kinds:
                self.issued += 1
                self.leaves[CertKind(kind)] = Leaf(f"{kind}-{self.issued}", self.ca, self.ca_bundle)
        elif isinstance(step, a.MoveLeader):
            self.leader = MEMBERS.index(step.to_member)
        elif isinstance(step, a.RollMember):
            # A new pod: its etcd starts on the Secret as it is now.
            member = self.leaves[CertKind.MEMBER]
            self.members[step.member] = Running(builders.pod_spec_hash(acting), member.bundle, member)
        else:
            self.kubelet_sync()

    def kubelet_sync(self) -> None:
        """Running pods' mounted Secret catches up: etcd serves the new leaf, keeps its CAs."""
        for name, m in self.members.items():
            self.members[name] = dataclasses.replace(m, serves=self.leaves[CertKind.MEMBER])

    def join_problems(self) -> list[str]:
        """What a member added now would meet, by the rule in the module's docstring."""
        joining = self.leaves[CertKind.MEMBER]
        problems = []
        for name, m in self.members.items():
            if joining.issuer not in m.trusts:
                problems.append(f"{name} trusts {m.trusts}, not the new member's signer {joining.issuer}")
            if m.serves.issuer not in joining.bundle:
                problems.append(f"the new member trusts {joining.bundle}, not {name}'s signer {m.serves.issuer}")
        return problems


def first_pod_hash() -> str:
    """The pod hash of members started on the old CA alone."""
    model = Model("")
    return builders.pod_spec_hash(decide_accepting(spec(3), model.observed()).acting_spec)


@pytest.mark.parametrize("kubelet_lags", [False, True])
def test_a_member_added_at_any_point_of_a_ca_rotation_is_trusted_and_trusts(kubelet_lags):
    model = Model(first_pod_hash())
    adds = 0
    for _ in range(200):
        seen = model.observed()
        probe = decide_accepting(spec(4), seen).action
        if isinstance(probe, a.AddLearner):
            adds += 1
            assert not model.join_problems(), (model.rotation, model.join_problems())
        decision = decide_accepting(spec(3), seen)
        if not kubelet_lags:
            model.kubelet_sync()
        if model.rotated.get(certs.ROTATE_CA) == "r1" and isinstance(decision.action, a.Steady):
            break
        model.apply(decision.action, decision.acting_spec)
    else:
        raise AssertionError(f"the rotation did not finish: {model.rotation}, last step {decision.action}")
    assert adds > 0  # the probe did meet moments at which a member would be added
    assert all(m.trusts == (NEW,) and m.serves.issuer == NEW for m in model.members.values())
    assert not model.join_problems()
