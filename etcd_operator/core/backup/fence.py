"""The backup executor's live fence before it creates anything. Pure.

A pass decides on its GET of the EtcdBackup and of its EtcdCluster; a deletion that lands
after those GETs is not in its observation. Right before a run starts (its snapshot upload)
and before a scratch pod is created, the executor reads the objects again and creates
nothing when the backup is gone, another object under the same name, or being deleted, or,
for a run, when the cluster is gone or being deleted. The next pass observes the deletion:
nothing is started for a backup being deleted (backup.planner), and a run waits for a cluster
that is not (prerequisites.cluster_wait)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from etcd_operator.core.live_fence import refusal


def creation_refusal(
    backup_uid: str,
    live_backup: Mapping[str, Any] | None,
    cluster_name: str | None,
    live_cluster: Mapping[str, Any] | None,
) -> str | None:
    """Why nothing may be created now, from the live objects (None: not found); `cluster_name`
    None: the cluster does not matter (a scratch pod). None when creating may go on."""
    refused = refusal("the EtcdBackup", live_backup, backup_uid)
    if refused or cluster_name is None:
        return refused
    return refusal(f"EtcdCluster {cluster_name}", live_cluster)
