"""What an EtcdBackup run or an EtcdRestore needs before it can start, and how to say what
it waits for. Pure: the controllers observe, the planners decide.

An object that arrives before what it needs (its cluster, its credentials Secret, its
source backup) waits for it in phase Pending, with a condition that names what is missing;
it is not failed, since every one of these can still arrive."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from etcd_operator.core.hibernation import SNAPSHOTTING, HibernationRecord

WAITING_FOR_CLUSTER = "WaitingForCluster"  # no such EtcdCluster yet, or it is being deleted
WAITING_FOR_BOOTSTRAP = "WaitingForClusterBootstrap"  # it exists, and has never served yet
WAITING_FOR_CLUSTER_RESTORE = "WaitingForClusterRestore"  # its data is being replaced
WAITING_FOR_SECRET = "WaitingForSecret"  # a Secret named in spec.storage.s3
WAITING_FOR_BACKUP = "WaitingForBackup"  # a restore's source EtcdBackup
CLUSTER_HIBERNATED = "ClusterHibernated"  # its members stop, are stopped, or are waking (status.hibernation)
WAIT_REASONS = frozenset(
    {
        WAITING_FOR_CLUSTER,
        WAITING_FOR_BOOTSTRAP,
        WAITING_FOR_CLUSTER_RESTORE,
        WAITING_FOR_SECRET,
        WAITING_FOR_BACKUP,
        CLUSTER_HIBERNATED,
    }
)

BOOTSTRAP_PHASES = ("", "Creating")  # a cluster's phase before it first served


@dataclasses.dataclass(frozen=True)
class Wait:
    reason: str  # one of WAIT_REASONS: the condition's reason
    message: str  # exactly what is missing, for people


@dataclasses.dataclass(frozen=True)
class ClusterReadiness:
    """The part of an EtcdCluster's status that tells whether it has started serving."""

    phase: str = ""
    available: bool = False
    ready_members: int = 0
    deleting: bool = False  # metadata.deletionTimestamp is set: nothing new starts on it
    hibernation: HibernationRecord | None = None  # status.hibernation: asleep, going to sleep or waking

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> ClusterReadiness:
        status = body.get("status") or {}
        available = any(
            c.get("type") == "Available" and c.get("status") == "True" for c in status.get("conditions") or []
        )
        deleting = bool((body.get("metadata") or {}).get("deletionTimestamp"))
        return cls(
            status.get("phase") or "",
            available,
            int(status.get("readyMembers") or 0),
            deleting,
            HibernationRecord.from_dict(status.get("hibernation")),
        )

    @property
    def asleep(self) -> bool:
        """Its members stop, are stopped or are waking: no snapshot can be taken. While it
        only waits for its snapshot (Snapshotting), every member still runs."""
        return self.hibernation is not None and self.hibernation.state != SNAPSHOTTING

    @property
    def bootstrapping(self) -> bool:
        """Created, and not yet Available with a ready member. A cluster that served once
        and then lost members is not bootstrapping: what it lacks may not come back."""
        return self.phase in BOOTSTRAP_PHASES and not (self.available and self.ready_members > 0)


def missing_cluster_wait(namespace: str, name: str, what: str) -> Wait:
    return Wait(
        WAITING_FOR_CLUSTER,
        f"EtcdCluster {namespace}/{name} does not exist yet; {what} starts once it exists and is Available",
    )


def cluster_wait(namespace: str, name: str, cluster: ClusterReadiness | None, what: str) -> Wait | None:
    """Why `what` (e.g. "the backup") cannot start on this cluster yet, or None."""
    if cluster is None:
        return missing_cluster_wait(namespace, name, what)
    if cluster.deleting:
        return Wait(
            WAITING_FOR_CLUSTER,
            f"EtcdCluster {namespace}/{name} is being deleted; {what} starts only on a cluster that is not",
        )
    if cluster.phase == "Restoring":
        return Wait(
            WAITING_FOR_CLUSTER_RESTORE,
            f"EtcdCluster {namespace}/{name} is being restored; {what} starts once it is Available again",
        )
    if cluster.asleep and cluster.hibernation is not None:
        return Wait(
            CLUSTER_HIBERNATED,
            f"EtcdCluster {namespace}/{name} is hibernated ({cluster.hibernation.state}): no member runs; "
            f"{what} is skipped until it is awake again",
        )
    if cluster.bootstrapping:
        return Wait(
            WAITING_FOR_BOOTSTRAP,
            f"EtcdCluster {namespace}/{name} is still bootstrapping (phase "
            f"{cluster.phase or 'not reported yet'}, {cluster.ready_members} "
            f"members ready); {what} starts once it is Available",
        )
    return None


def secret_names(s3: Mapping[str, Any]) -> tuple[str, ...]:
    """The Secrets a storage.s3 block reads: the credentials and the CA bundle, if named."""
    names = [(s3.get(ref) or {}).get("name") for ref in ("credentialsSecretRef", "caBundleSecretRef")]
    return tuple(dict.fromkeys(n for n in names if n))


def secrets_wait(namespace: str, missing: tuple[str, ...], what: str) -> Wait | None:
    """Named Secrets that do not exist yet. One that exists but lacks its keys is not
    waited for: a run fails on it at once (it will not fix itself by waiting)."""
    if not missing:
        return None
    listed = ", ".join(f"{namespace}/{name}" for name in missing)
    return Wait(WAITING_FOR_SECRET, f"Secret {listed} does not exist yet; {what} starts once it exists")
