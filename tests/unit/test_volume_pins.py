"""Where a member's local volume lives, and whether the API server still has that node
(cluster/observer.py): only an answer that no Node carries the hostname is evidence."""

from __future__ import annotations

from etcd_operator.clients.kube import client as kube
from etcd_operator.controllers.cluster.observer import pin_waiting_volumes, pinned_hostname, volume_pin
from etcd_operator.core.cluster.observed import PodView, PVCView, VolumePin


def pv(*terms: list[dict]) -> dict:
    return {
        "metadata": {"name": "pv-1"},
        "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": t} for t in terms]}}},
    }


def on_host(*values: str, operator: str = "In", key: str = "kubernetes.io/hostname") -> dict:
    return {"key": key, "operator": operator, "values": list(values)}


def pvc(name: str = "data-c-1", volume: str | None = "pv-1", phase: str = "Bound") -> dict:
    return {"metadata": {"name": name}, "spec": {"volumeName": volume} if volume else {}, "status": {"phase": phase}}


class FakeKube:
    """Answers GETs of PVs and label-selected lists of Nodes; `refuse` names the kinds it
    answers 403 for, as a namespaced install's rights do."""

    def __init__(
        self,
        pvs: dict[str, dict],
        hostnames: set[str],
        refuse: frozenset = frozenset(),
        time_out: frozenset = frozenset(),
    ):
        self.pvs, self.hostnames, self.refuse, self.time_out = pvs, hostnames, refuse, time_out
        self.calls: list[tuple[str, str]] = []

    def _check(self, resource: kube.Resource, what: str) -> None:
        self.calls.append((resource.plural, what))
        if resource.plural in self.refuse:
            raise kube.ApiError(403, "Forbidden", f"cannot get {resource.plural}")
        if resource.plural in self.time_out:
            raise TimeoutError()

    async def get(self, resource: kube.Resource, namespace, name: str):
        self._check(resource, name)
        assert resource == kube.PVS and namespace is None
        return self.pvs.get(name)

    async def list(self, resource: kube.Resource, namespace, label_selector: str = ""):
        self._check(resource, label_selector)
        assert resource == kube.NODES and namespace is None
        hostname = label_selector.removeprefix("kubernetes.io/hostname=")
        return [{"metadata": {"name": f"node-named-{hostname}"}}] if hostname in self.hostnames else []


def test_a_local_volume_is_pinned_to_the_one_hostname_its_pv_requires():
    assert pinned_hostname(pv([on_host("node-2")])) == "node-2"
    assert pinned_hostname(pv([on_host("node-2")], [on_host("node-2")])) == "node-2"


def test_a_volume_that_may_live_on_several_hosts_or_none_is_pinned_nowhere():
    assert pinned_hostname({"spec": {}}) is None
    assert pinned_hostname(pv([on_host("node-1", "node-2")])) is None
    assert pinned_hostname(pv([on_host("node-1")], [on_host("node-2")])) is None
    assert pinned_hostname(pv([on_host("node-1")], [on_host("zone-a", key="topology.kubernetes.io/zone")])) is None
    assert pinned_hostname(pv([on_host("node-1", operator="NotIn")])) is None


async def test_a_node_the_api_server_does_not_have_is_gone():
    fake = FakeKube({"pv-1": pv([on_host("node-2")])}, hostnames={"node-1", "node-3"})
    assert await volume_pin(fake, pvc()) == VolumePin("node-2", node_gone=True)
    assert fake.calls == [("persistentvolumes", "pv-1"), ("nodes", "kubernetes.io/hostname=node-2")]


async def test_a_node_still_in_the_api_is_not_gone_whatever_its_state():
    fake = FakeKube({"pv-1": pv([on_host("node-2")])}, hostnames={"node-2"})
    assert await volume_pin(fake, pvc()) == VolumePin("node-2")


async def test_without_the_rights_to_read_pvs_or_nodes_it_is_unknown():
    pvs = {"pv-1": pv([on_host("node-2")])}
    no_pvs = await volume_pin(FakeKube(pvs, set(), refuse=frozenset({"persistentvolumes"})), pvc())
    assert no_pvs.node is None and not no_pvs.node_gone and "403" in no_pvs.unknown
    no_nodes = await volume_pin(FakeKube(pvs, set(), refuse=frozenset({"nodes"})), pvc())
    assert no_nodes.node == "node-2" and not no_nodes.node_gone and "403" in no_nodes.unknown


async def test_a_read_that_fails_or_times_out_is_unknown_and_does_not_fail_the_pass():
    pvs = {"pv-1": pv([on_host("node-2")])}
    for kind in ("persistentvolumes", "nodes"):
        pin = await volume_pin(FakeKube(pvs, set(), time_out=frozenset({kind})), pvc())
        assert not pin.node_gone and pin.unknown.endswith("TimeoutError")


async def test_an_unbound_claim_or_a_missing_pv_is_no_evidence():
    fake = FakeKube({}, set())
    assert await volume_pin(fake, pvc(volume=None, phase="Pending")) is None
    missing = await volume_pin(fake, pvc(volume="pv-9"))
    assert not missing.node_gone and missing.unknown


async def test_only_volumes_of_pending_member_pods_are_looked_up():
    fake = FakeKube({"pv-1": pv([on_host("node-2")])}, hostnames=set())

    def pod(name: str, phase: str) -> PodView:
        return PodView(name, f"uid-{name}", 1, phase, False, False, None, None, "existing", "", False)

    pods = {"c-0": pod("c-0", "Running"), "c-1": pod("c-1", "Pending")}
    views = {n: PVCView(n, f"uid-{n}", 1, False, None) for n in ("data-c-0", "data-c-1", "data-c-2")}
    raw = [pvc("data-c-0"), pvc("data-c-1"), pvc("data-c-2")]
    pinned = await pin_waiting_volumes(fake, views, raw, pods)
    assert pinned["data-c-1"].pin == VolumePin("node-2", node_gone=True)
    assert pinned["data-c-0"].pin is None and pinned["data-c-2"].pin is None
    assert [what for kind, what in fake.calls if kind == "persistentvolumes"] == ["pv-1"]
