"""What a restore creates and writes: the target EtcdCluster of a newCluster restore, the
members' PVCs, the patches that set old data aside, and one restore pod per member (fetch
the verified snapshot onto scratch space with the operator image, checking its sha256
again, then restore the member's data directory with the target version's own etcdutl,
the full initial cluster, a token of this restore and the spec's revision bump). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from etcd_operator import API_GROUP, API_VERSION
from etcd_operator.core import seed_containers
from etcd_operator.core.cluster import builders as cluster_builders
from etcd_operator.core.cluster import naming
from etcd_operator.core.cluster.spec import ClusterSpec

SCRATCH_MOUNT = "/scratch"
SNAPSHOT_FILE = f"{SCRATCH_MOUNT}/snapshot.db"
SCRATCH_SPARE_BYTES = 64 << 20  # beyond the snapshot: the partial file's rename, filesystem overhead
LABEL_RESTORE = f"{API_GROUP}/restore"
LABEL_RESTORE_MEMBER = f"{API_GROUP}/restore-member"  # on a restore pod: the member it restores
LABEL_PRESERVED_BY = f"{API_GROUP}/preserved-by-restore"
LABEL_PRESERVED_FROM = f"{API_GROUP}/preserved-from-cluster"
ANNOTATION_RESTORED_FROM = f"{API_GROUP}/restored-from"  # on the EtcdCluster: the restores applied to it
ANNOTATION_RESTORED_BY = naming.ANNOTATION_RESTORED_BY  # on a member's PVC: its restore pod succeeded
ANNOTATION_SEED_OF = f"{API_GROUP}/seed-of-restore"  # on a member's PVC: created by this restore
LABEL_VALUE_MAX = 63


def restore_pod_name(restore: str, ordinal: int) -> str:
    """Within a DNS label for a maximal restore name (58) and ordinals below 1000."""
    return f"{restore}-s{ordinal}"


def restore_token(restore_uid: str) -> str:
    """The initial-cluster token of a restored cluster: new for every restore, so the
    restored cluster never takes peers of the old one (or of another restore) for its own."""
    return f"restore-{restore_uid}"


def initial_cluster(cluster: str, namespace: str, members: tuple[str, ...] | list[str], tls: bool = False) -> str:
    return ",".join(f"{m}={naming.peer_url(cluster, namespace, m, tls)}" for m in sorted(members))


def scratch_size(snapshot_bytes: int | None) -> str:
    """The emptyDir a restore pod stages the snapshot on: the snapshot and some spare."""
    return str((snapshot_bytes or 0) + SCRATCH_SPARE_BYTES)


def label_values(restore: str, cluster: str) -> dict[str, str]:
    """Every label value a restore writes, by where it goes."""
    return {
        f"{LABEL_RESTORE} (restore pod)": restore,
        LABEL_PRESERVED_BY: restore,
        LABEL_PRESERVED_FROM: cluster,
        naming.LABEL_CLUSTER: cluster,
    }


def hold_annotations(restore: str, restore_uid: str) -> dict[str, str]:
    """The hold a restore puts on its target: its name, and its uid, which the cluster's
    controller acknowledges in status.restoreHold before the restore changes anything."""
    return {naming.ANNOTATION_RESTORE_IN_PROGRESS: restore, naming.ANNOTATION_RESTORE_HOLD: restore_uid}


def new_cluster(
    restore: str,
    namespace: str,
    name: str,
    spec: Mapping[str, Any],
    labels: Mapping[str, str] | None = None,
    restore_uid: str = "",
    finalizer: str | None = None,
) -> dict[str, Any]:
    """The EtcdCluster a newCluster restore creates, held stopped by the restore until the
    seed member's data is in place. It carries the restore's labels, so that a sharded
    operator's shard that took the restore takes the new cluster too, and that instance's
    `finalizer`: held by it from its creation, no other instance whose selector it also
    matches can take it first."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "annotations": hold_annotations(restore, restore_uid),
    }
    if labels:
        metadata["labels"] = dict(labels)
    if finalizer:
        metadata["finalizers"] = [finalizer]
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": "EtcdCluster",
        "metadata": metadata,
        "spec": dict(spec),
    }


def seed_pvc(spec: ClusterSpec, cluster: str, namespace: str, member: str, restore_uid: str) -> dict[str, Any]:
    """The seed member's PVC, marked as this restore's own: a restore only ever writes a
    snapshot into a volume it created."""
    manifest = cluster_builders.member_pvc(spec, cluster, namespace, member, None)
    manifest["metadata"]["annotations"][ANNOTATION_SEED_OF] = restore_uid
    return manifest


def set_aside_patch(restore: str, cluster: str, owners: list[Mapping[str, Any]], cluster_uid: str) -> dict[str, Any]:
    """Takes an old PVC out of the cluster (no member label, no owner reference to it)
    and marks who kept it. The PVC and its data stay."""
    return cluster_builders.set_aside_pvc_patch(
        cluster, cluster_uid, owners, {LABEL_PRESERVED_BY: restore, LABEL_PRESERVED_FROM: cluster}
    )


def restore_pod(
    restore: str,
    namespace: str,
    cluster: str,
    member: str,
    members: tuple[str, ...],
    token: str,
    etcd_image: str,
    operator_image: str,
    source: Mapping[str, Any],
    key: str,
    sha256: str,
    snapshot_bytes: int | None,
    tls: bool = False,
    pull_secrets: list[dict[str, str]] | None = None,
    revision_bump: int = 0,
    keys_secret: str | None = None,
) -> dict[str, Any]:
    """Restores one member's data directory; every member's pod gets the same snapshot,
    the same initial cluster (all `members`), the same token and the same `revision_bump`
    (spec.revisionBump: etcdutl's --bump-revision and --mark-compacted when > 0)."""
    peer = naming.peer_url(cluster, namespace, member, tls)
    ordinal = naming.member_ordinal(cluster, member)
    volumes: list[dict[str, Any]] = [
        {"name": "data", "persistentVolumeClaim": {"claimName": naming.pvc_name(member)}},
        {"name": "scratch", "emptyDir": {"sizeLimit": scratch_size(snapshot_bytes)}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "data", "mountPath": cluster_builders.DATA_MOUNT},
        {"name": "scratch", "mountPath": SCRATCH_MOUNT},
    ]
    ca_volumes, ca_mounts = seed_containers.ca_bundle(source)
    key_volumes, key_mounts = seed_containers.keys_bundle(keys_secret)
    volumes += ca_volumes + key_volumes
    fetch_mounts = mounts + ca_mounts + key_mounts
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": restore_pod_name(restore, ordinal if ordinal is not None else 0),
            "namespace": namespace,
            "labels": {LABEL_RESTORE: restore, LABEL_RESTORE_MEMBER: member},
        },
        "spec": seed_containers.one_shot_pod_spec(
            volumes,
            init_containers=[
                seed_containers.fetch_container(
                    operator_image,
                    source,
                    key,
                    sha256,
                    SNAPSHOT_FILE,
                    cluster_builders.DATA_DIR,
                    SCRATCH_MOUNT,
                    fetch_mounts,
                    keys_secret=keys_secret,
                )
            ],
            containers=[
                seed_containers.etcdutl_restore(
                    etcd_image,
                    SNAPSHOT_FILE,
                    member,
                    cluster_builders.DATA_DIR,
                    initial_cluster(cluster, namespace, members, tls),
                    peer,
                    token,
                    mounts,
                    revision_bump=revision_bump,
                )
            ],
            pull_secrets=pull_secrets or [],
        ),
    }
