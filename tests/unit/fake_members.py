"""A 3-member cluster behind fakes of the interfaces ClusterObserver reads (the etcd client
pool, the TLS Secrets, the version gauge), for tests that drive the real observer."""

from __future__ import annotations

from etcd_operator.clients.etcd.client import EtcdError
from etcd_operator.controllers.cluster.observer import ClusterObserver, StorageClassExpansion
from etcd_operator.core.cluster import naming
from etcd_operator.core.cluster.observed import Member, MemberStatus, TLSView

CLUSTER, NAMESPACE, CLUSTER_ID = "c", "ns", 0xC1


def member_id(ordinal: int) -> int:
    return 0x100 + ordinal


def endpoint(ordinal: int) -> str:
    return f"10.0.0.{ordinal}:{naming.CLIENT_PORT}"


class FakeMember:
    def __init__(self, ordinal: int, cluster: FakeCluster):
        self.ordinal, self.cluster = ordinal, cluster

    async def status(self) -> MemberStatus:
        if f"c-{self.ordinal}" in self.cluster.down:
            raise EtcdError(endpoint(self.ordinal), "Status", None, "connection refused")
        return MemberStatus(
            CLUSTER_ID, member_id(self.ordinal), member_id(0), "3.6.16", 1000, 1000, 100, 100, 100, 2, False, ()
        )  # c-0 leads

    async def member_list(self):
        return CLUSTER_ID, tuple(
            Member(
                member_id(o),
                f"c-{o}",
                (naming.peer_url(CLUSTER, NAMESPACE, f"c-{o}"),),
                (naming.client_url(CLUSTER, NAMESPACE, f"c-{o}"),),
                False,
            )
            for o in range(3)
        )


class FakeCluster:
    """Three members c-0..c-2 (c-0 leads); those named in `down` do not answer (their pods
    run, not ready). Also the EtcdClientPool interface the observer uses."""

    def __init__(self):
        self.down: set[str] = set()
        self.members = {endpoint(o): FakeMember(o, self) for o in range(3)}

    async def use_tls(self, credentials) -> None:
        pass

    def get(self, address: str) -> FakeMember:
        return self.members[address]

    async def retain_only(self, endpoints) -> None:
        pass

    def children(self) -> tuple[list[dict], list[dict]]:
        """The member pods and PVCs, as the operator's caches hold them."""
        pods, pvcs = [], []
        for o in range(3):
            name = f"c-{o}"
            annotations = {
                naming.ANNOTATION_MEMBER_ID: f"{member_id(o):x}",
                naming.ANNOTATION_INITIAL_STATE: "existing",
                naming.ANNOTATION_INITIAL_CLUSTER: f"{name}={naming.peer_url(CLUSTER, NAMESPACE, name)}",
            }
            ready = "False" if name in self.down else "True"
            pods.append(
                {
                    "metadata": {"name": name, "uid": f"uid-{name}", "annotations": annotations},
                    "status": {
                        "phase": "Running",
                        "podIP": endpoint(o).rsplit(":", 1)[0],
                        "conditions": [{"type": "Ready", "status": ready}],
                        "containerStatuses": [{"started": True, "restartCount": 0}],
                    },
                }
            )
            pvcs.append(
                {
                    "metadata": {
                        "name": naming.pvc_name(name),
                        "uid": f"uid-pvc-{name}",
                        "annotations": {naming.ANNOTATION_MEMBER_ID: f"{member_id(o):x}"},
                    }
                }
            )
        return pods, pvcs


class NoTLS:
    async def observe(self, kube_client, body, live=True):
        return TLSView(), None


async def no_cluster_version(endpoint):
    return None


def cluster_body(spec: dict, status_members: list[dict] | None = None, annotations: dict | None = None) -> dict:
    """The EtcdCluster as the API server holds it."""
    members = (
        status_members
        if status_members is not None
        else [{"name": f"c-{o}", "id": f"{member_id(o):x}", "healthy": True} for o in range(3)]
    )
    return {
        "metadata": {
            "name": CLUSTER,
            "namespace": NAMESPACE,
            "uid": "uid-c",
            "generation": 1,
            "annotations": annotations or {},
        },
        "spec": spec,
        "status": {"clusterID": f"{CLUSTER_ID:x}", "members": members},
    }


def observer_of(etcd: FakeCluster, monkeypatch) -> ClusterObserver:
    """A ClusterObserver (one operator process's) reading `etcd`, without TLS or a version gauge."""
    from etcd_operator.controllers.cluster import observer as observer_module

    monkeypatch.setattr(observer_module, "fetch_cluster_version", no_cluster_version)
    return ClusterObserver(None, etcd, StorageClassExpansion(None, ttl=0.0), NoTLS())
