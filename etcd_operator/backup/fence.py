"""The backup executor's live fence before it creates anything. Pure.

A pass decides on its GET of the EtcdBackup and of its EtcdCluster; a deletion that lands
after those GETs is not in its observation. Right before a run starts (its snapshot upload)
and before a scratch pod is created, the executor reads the objects again and creates
nothing when the backup is gone, another object under the same name, or being deleted, or,
for a run, when the cluster is gone or being deleted. The next pass observes the deletion:
nothing is started for a backup being deleted (backup.planner), and a run waits for a cluster
that is not (prerequisites.cluster_wait)."""

from __future__ import annotations

from typing import Any, Mapping


def creation_refusal(backup_uid: str, live_backup: Mapping[str, Any] | None, cluster_name: str | None,
                     live_cluster: Mapping[str, Any] | None) -> str | None:
    """Why nothing may be created now, from the live objects (None: not found); `cluster_name`
    None: the cluster does not matter (a scratch pod). None when creating may go on."""
    if live_backup is None:
        return "the EtcdBackup is gone"
    meta = live_backup.get("metadata") or {}
    if meta.get("uid") != backup_uid:
        return f"the EtcdBackup is another object now (uid {meta.get('uid')}, not {backup_uid})"
    if meta.get("deletionTimestamp"):
        return "the EtcdBackup is being deleted"
    if cluster_name is None:
        return None
    if live_cluster is None:
        return f"EtcdCluster {cluster_name} is gone"
    if (live_cluster.get("metadata") or {}).get("deletionTimestamp"):
        return f"EtcdCluster {cluster_name} is being deleted"
    return None
