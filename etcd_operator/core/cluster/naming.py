"""Names, labels and URLs of a cluster's members and child objects."""

from __future__ import annotations

import re

from etcd_operator import API_GROUP

# The Kubernetes cluster DNS domain unless CLUSTER_DOMAIN says otherwise.
DEFAULT_CLUSTER_DOMAIN = "cluster.local"
CLIENT_PORT = 2379
PEER_PORT = 2380
METRICS_PORT = 2381

LABEL_CLUSTER = f"{API_GROUP}/cluster"
LABEL_MEMBER = f"{API_GROUP}/member"
ANNOTATION_MEMBER_ID = f"{API_GROUP}/member-id"
ANNOTATION_INITIAL_CLUSTER = f"{API_GROUP}/initial-cluster"
ANNOTATION_INITIAL_STATE = f"{API_GROUP}/initial-cluster-state"
ANNOTATION_SPEC_HASH = f"{API_GROUP}/spec-hash"
ANNOTATION_FORCE_NEW_CLUSTER = f"{API_GROUP}/force-new-cluster"
ANNOTATION_APPROVE_QUORUM_RECOVERY = f"{API_GROUP}/approve-quorum-recovery"
ANNOTATION_RESTORE_IN_PROGRESS = f"{API_GROUP}/restore-in-progress"  # the holding EtcdRestore's name
ANNOTATION_RESTORE_HOLD = f"{API_GROUP}/restore-hold"  # ... and its uid: which hold status.restoreHold acknowledges
ANNOTATION_MIN_ORDINAL = f"{API_GROUP}/min-ordinal"
# Set to any new value to request a rotation of the leaf certificates, or of the CA.
ANNOTATION_ROTATE_CERTIFICATES = f"{API_GROUP}/rotate-certificates"
ANNOTATION_ROTATE_CA = f"{API_GROUP}/rotate-ca"
# On a member's PVC: its data directory was restored from a snapshot by this EtcdRestore (uid).
ANNOTATION_RESTORED_BY = f"{API_GROUP}/restored-by"
ANNOTATION_DEFRAGMENT = f"{API_GROUP}/defragment"  # a new token asks for one defragmentation of every member
# A new value asks for one leader move: "<token> to <member>" (cluster/leader_move.py).
ANNOTATION_MOVE_LEADER = f"{API_GROUP}/move-leader"
MOVE_LEADER_TARGET_SEPARATOR = " to "
# Data of members left behind by a quorum recovery: kept, out of the cluster's selector.
LABEL_SET_ASIDE_FROM = f"{API_GROUP}/set-aside-from-cluster"
LABEL_SET_ASIDE_BY = f"{API_GROUP}/set-aside-by"
# On a spec.auth user's client certificate Secret: the etcd user it names (its CN).
LABEL_AUTH_USER = f"{API_GROUP}/auth-user"

_ORDINAL = re.compile(r"^(?P<cluster>.+)-(?P<ordinal>[0-9]+)$")


def min_ordinal(annotations: dict[str, str]) -> tuple[int, str | None]:
    """The lowest ordinal a new member may take (ANNOTATION_MIN_ORDINAL, set by an in-place
    restore), and why the annotation is ignored if it is: anything but a non-negative integer
    counts as absent (0)."""
    text = (annotations.get(ANNOTATION_MIN_ORDINAL) or "").strip()
    if not text:
        return 0, None
    if not (text.isascii() and text.isdigit()):
        return 0, f"annotation {ANNOTATION_MIN_ORDINAL}={text!r} is not a non-negative integer; ignored"
    return int(text), None


def member_name(cluster: str, ordinal: int) -> str:
    return f"{cluster}-{ordinal}"


def member_ordinal(cluster: str, name: str) -> int | None:
    match = _ORDINAL.match(name)
    if not match or match.group("cluster") != cluster:
        return None
    return int(match.group("ordinal"))


def peer_service(cluster: str) -> str:
    return f"{cluster}-peer"


def client_service(cluster: str) -> str:
    return f"{cluster}-client"


def pdb_name(cluster: str) -> str:
    return cluster


def pvc_name(member: str) -> str:
    return f"data-{member}"


def pvc_member(pvc: str) -> str:
    """The member whose data the PVC named `pvc` holds (pvc_name's inverse)."""
    return pvc.removeprefix("data-")


def member_host(cluster: str, namespace: str, member: str) -> str:
    return f"{member}.{peer_service(cluster)}.{namespace}.svc"


def scheme(tls: bool) -> str:
    return "https" if tls else "http"


def peer_url(cluster: str, namespace: str, member: str, tls: bool = False) -> str:
    return f"{scheme(tls)}://{member_host(cluster, namespace, member)}:{PEER_PORT}"


def client_url(cluster: str, namespace: str, member: str, tls: bool = False) -> str:
    return f"{scheme(tls)}://{member_host(cluster, namespace, member)}:{CLIENT_PORT}"


def client_service_host(cluster: str, namespace: str) -> str:
    return f"{client_service(cluster)}.{namespace}.svc"


def member_from_peer_url(cluster: str, namespace: str, url: str) -> str | None:
    """The member name a peer URL of this cluster points at, if it is one of ours."""
    suffix = f".{peer_service(cluster)}.{namespace}.svc:{PEER_PORT}"
    host = url.removeprefix("http://").removeprefix("https://")
    return host[: -len(suffix)] if host.endswith(suffix) else None


def selector_labels(cluster: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "etcd", "app.kubernetes.io/instance": cluster, LABEL_CLUSTER: cluster}


def member_labels(cluster: str, member: str) -> dict[str, str]:
    return {**selector_labels(cluster), "app.kubernetes.io/managed-by": "etcd-operator", LABEL_MEMBER: member}


def label_selector(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def quorum(voters: int) -> int:
    return voters // 2 + 1
