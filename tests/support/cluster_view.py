"""One EtcdCluster as a safety test sees it: its members' identity (etcd member IDs, pod and
PVC UIDs by name), the endpoints of its running members, and its events."""

from __future__ import annotations

import dataclasses

from kubernetes import client

from etcd_operator.clients.etcd.client import EtcdError
from etcd_operator.core.cluster import naming
from tests.support.etcd_data import member_ids

GROUP, VERSION = "etcd.operator.dev", "v1alpha1"
# What replaces or rewrites members: a safety test of a state to repair in place sees none.
DESTRUCTIVE_EVENTS = {"QuorumRecoveryStarted", "MemberRemoved", "MemberReplaced", "MemberRolling"}


@dataclasses.dataclass(frozen=True)
class Identity:
    """Who the cluster's members are: etcd member IDs, pod and PVC UIDs by name."""

    members: frozenset[int] | None  # None: no member answered
    pods: dict[str, str]
    pvcs: dict[str, str]


class ClusterView:
    """Reads one EtcdCluster, its pods, PVCs, events and etcd member list."""

    def __init__(self, kube_api, namespace: str, name: str):
        self.core = client.CoreV1Api(kube_api)
        self.custom = client.CustomObjectsApi(kube_api)
        self.namespace, self.name = namespace, name
        self.selector = naming.label_selector(naming.selector_labels(name))

    def cluster(self) -> dict:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "etcdclusters", self.name)

    def pods(self) -> list:
        return self.core.list_namespaced_pod(self.namespace, label_selector=self.selector).items

    def pvcs(self) -> dict[str, str]:
        items = self.core.list_namespaced_persistent_volume_claim(self.namespace, label_selector=self.selector).items
        return {p.metadata.name: p.metadata.uid for p in items}

    def serving_endpoints(self) -> list[str]:
        """Client endpoints of the member pods that run (not ended, not being deleted)."""
        return sorted(
            f"{p.status.pod_ip}:{naming.CLIENT_PORT}"
            for p in self.pods()
            if p.status.phase == "Running" and p.status.pod_ip and not p.metadata.deletion_timestamp
        )

    def identity(self) -> Identity:
        pods = {p.metadata.name: p.metadata.uid for p in self.pods()}
        try:
            members = member_ids(self.serving_endpoints())
        except EtcdError:
            members = None
        return Identity(members, pods, self.pvcs())

    def event_reasons(self, kind: str | None = None) -> set[str]:
        events = self.core.list_namespaced_event(self.namespace, field_selector=f"involvedObject.name={self.name}")
        return {e.reason for e in events.items if kind is None or e.type == kind}


def hex_ids(ids: frozenset[int] | None) -> list[str] | None:
    return None if ids is None else sorted(f"{i:x}" for i in ids)
