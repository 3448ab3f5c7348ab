"""One cluster's members as the tests on the real nodes follow them through a fault: the live
pods, each member's etcd ID and node, the operator's MemberReplaced events, and a follower away
from the acting replica of the chart's operator (so that a fault hits etcd only)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from etcd_operator.core.cluster import naming
from tests.support import chart_release
from tests.support.chart_release import delete_namespace, restricted_namespace
from tests.support.clusters import apply_cluster, condition, events, get_cluster, member_pods, wait_healthy
from tests.support.kubectl import kubectl_json

OPERATOR_LEASE = "etcd-operator-leader"  # the chart's; its holder is <pod name>_<random>


@contextlib.contextmanager
def plaintext_cluster(namespace: str, cluster: str, unhealthy_timeout_seconds: int) -> Iterator[str]:
    """A 3-member plaintext cluster in a restricted namespace of its own, healthy, for a module's
    faults: plaintext, so that the host reaches each member by its pod IP whoever owns
    /etc/resolv.conf. The namespace goes afterwards without waiting (outside any hold of the
    nodes: it takes 30 s)."""
    restricted_namespace(namespace)
    apply_cluster(
        namespace,
        cluster,
        {
            "size": 3,
            "version": "3.6.16",
            "storage": {"size": "1Gi"},
            "recovery": {"memberUnhealthyTimeout": f"{unhealthy_timeout_seconds}s"},
        },
    )
    try:
        wait_healthy(namespace, cluster, 3, timeout=300)
        yield cluster
    finally:
        delete_namespace(namespace, wait=False)


class ClusterMembers:
    def __init__(self, namespace: str, cluster: str):
        self.namespace, self.cluster = namespace, cluster

    def live(self) -> list[dict]:
        return [p for p in member_pods(self.namespace, self.cluster) if not p["metadata"].get("deletionTimestamp")]

    def pod(self, name: str) -> dict:
        return kubectl_json("get", "pod", name, "-n", self.namespace)

    def in_status(self) -> dict[str, dict]:
        return {m["name"]: m for m in get_cluster(self.namespace, self.cluster)["status"]["members"]}

    def identities(self) -> dict[str, tuple[str, str]]:
        """Member name: (etcd member ID, node)."""
        ids = {name: m["id"] for name, m in self.in_status().items()}
        return {p["metadata"]["name"]: (ids.get(p["metadata"]["name"]), p["spec"].get("nodeName")) for p in self.live()}

    def pod_uids(self) -> dict[str, str]:
        return {p["metadata"]["name"]: p["metadata"]["uid"] for p in self.live()}

    def pvc_uids(self) -> dict[str, str]:
        selector = naming.label_selector(naming.selector_labels(self.cluster))
        return {
            p["metadata"]["name"]: p["metadata"]["uid"]
            for p in kubectl_json("get", "pvc", "-n", self.namespace, "-l", selector)["items"]
        }

    def replacements(self) -> list[str]:
        return [e["message"] for e in events(self.namespace, self.cluster) if e.get("reason") == "MemberReplaced"]

    def operator_leader_node(self) -> str:
        holder = kubectl_json("get", "lease", OPERATOR_LEASE, "-n", chart_release.NAMESPACE)["spec"]["holderIdentity"]
        return kubectl_json("get", "pod", holder.rsplit("_", 1)[0], "-n", chart_release.NAMESPACE)["spec"]["nodeName"]

    def follower_away_from_the_operator(self) -> tuple[str, str]:
        """A follower on a node that does not run the acting operator: the fault hits etcd only."""
        leader = next(name for name, m in self.in_status().items() if m["role"] == "leader")
        operator_node = self.operator_leader_node()
        placed = sorted((p["metadata"]["name"], p["spec"]["nodeName"]) for p in self.live())
        return next((name, node) for name, node in placed if name != leader and node != operator_node)

    def replaced(self, before: dict[str, tuple[str, str]], victim: str) -> Callable[[], object]:
        """A predicate: three members again, all with IDs, the victim's ID gone. The replacement
        may take the victim's name (the operator reuses the next free ordinal)."""
        gone = before[victim][0]

        def check():
            now = self.identities()
            ids = [member_id for member_id, _ in now.values()]
            return len(now) == 3 and None not in ids and gone not in ids and now

        return check

    def where_things_stand(self, victim: str) -> str:
        """What a timed-out wait saw last: the victim's container, the cluster's Ready condition,
        its members' health and the events of the last minutes."""
        try:
            statuses = self.pod(victim)["status"].get("containerStatuses") or []
        except Exception as e:
            statuses = [f"unreadable: {e}"]
        cluster = get_cluster(self.namespace, self.cluster)
        members = [(m["name"], m["role"], m["healthy"]) for m in cluster["status"].get("members") or []]
        said = [f"{e.get('reason')}: {e.get('message')}" for e in events(self.namespace, self.cluster)][-8:]
        ready = condition(cluster, "Ready")
        return f"{victim}'s containers: {statuses}; Ready: {ready}; members: {members}; events: {said}"


def newcomer(before: dict[str, tuple[str, str]], now: dict[str, tuple[str, str]]) -> str:
    known = {member_id for member_id, _ in before.values()}
    (name,) = [name for name, (member_id, _) in now.items() if member_id not in known]
    return name


def unchanged(what: str, now, before) -> None:
    assert now == before, f"{what} changed: {before} -> {now}"
