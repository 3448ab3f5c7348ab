"""Which snapshots a retention policy deletes, and which backup is the newest. Pure: works
on manifests only, never on object names (names sort wrongly, see coreos#2113).

Order (no writer's clock decides it):
- within one lineage (one source cluster ID), by revision: etcd's revision never goes back
  within a cluster, whatever the clock of the replica that wrote the manifest said;
- between lineages, by the cluster ID history the backup controller recorded
  (status.clusterIDHistory, oldest first: the order in which this backup's runs first saw
  each cluster ID). A restore gives a cluster a new ID (a token per restore), so it starts
  a new lineage at the end of the history;
- a lineage the history does not name (written before it was recorded, or dropped from
  its bounded tail) comes after every recorded one, by its newest backup's creation time,
  and is never deleted: where it sits in time is not known.

Age (maxAge) needs two clocks to agree, so that a skewed clock can only keep a backup
longer, never delete it early: the store's (its own time in a listing response minus the
snapshot object's LastModified, both set by the store) and this operator's (its now minus
the manifest's createdAt). Without the store's times, nothing is deleted for age.

Invariants, each covered by tests/unit/test_backup_logic.py and test_backup_catalogue.py:
- the newest backup is never deleted, nor the newest verified one;
- a key the caller names as kept (the one just written) is never deleted;
- a lineage the history does not name is never deleted;
- only the manifests passed in are considered: the caller passes this backup's own."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Collection, Mapping, Sequence

from etcd_operator.core.backup.manifest import Identity, Manifest
from etcd_operator.core.timefmt import parse_datetime

HISTORY_LENGTH = 32  # cluster IDs kept in status.clusterIDHistory (the oldest go first)


@dataclasses.dataclass(frozen=True)
class StoreTimes:
    """Times the store itself set: its clock when it answered a listing, and each
    snapshot object's LastModified."""

    now: datetime.datetime
    modified: Mapping[str, datetime.datetime]


def extend_history(history: Sequence[str], cluster_id: str) -> tuple[str, ...]:
    """The history after a backup of `cluster_id`: appended when first seen, bounded."""
    known = tuple(history)
    if not cluster_id or cluster_id in known:
        return known
    return (known + (cluster_id,))[-HISTORY_LENGTH:]


def _created(manifest: Manifest) -> datetime.datetime:
    return parse_datetime(manifest.created_at)


def _by_revision(manifest: Manifest) -> tuple[int, str]:
    return manifest.revision, manifest.snapshot_key


def _lineages(manifests: list[Manifest]) -> dict[str, list[Manifest]]:
    lineages: dict[str, list[Manifest]] = {}
    for manifest in manifests:
        lineages.setdefault(manifest.cluster_id, []).append(manifest)
    for members in lineages.values():
        members.sort(key=_by_revision, reverse=True)
    return lineages


def newest_first(manifests: list[Manifest], history: Sequence[str] = ()) -> list[Manifest]:
    lineages = _lineages(manifests)
    position = {cluster_id: index for index, cluster_id in enumerate(history)}
    known = sorted((c for c in lineages if c in position), key=position.__getitem__, reverse=True)
    unknown = sorted(
        (c for c in lineages if c not in position), key=lambda c: (_created(lineages[c][0]), c), reverse=True
    )
    return [manifest for cluster_id in known + unknown for manifest in lineages[cluster_id]]


def newest_verified(manifests: list[Manifest], history: Sequence[str] = ()) -> Manifest | None:
    return next((m for m in newest_first(manifests, history) if m.verified), None)


def _age_seconds(manifest: Manifest, now: datetime.datetime, store: StoreTimes | None) -> float | None:
    """The smaller of the two clocks' ages, or None when the store's is not known."""
    if store is None or manifest.snapshot_key not in store.modified:
        return None
    by_store = (store.now - store.modified[manifest.snapshot_key]).total_seconds()
    by_operator = (now - _created(manifest)).total_seconds()
    return min(by_store, by_operator)


def _too_old(
    manifest: Manifest, max_age_seconds: float | None, now: datetime.datetime, store: StoreTimes | None
) -> bool:
    if max_age_seconds is None:
        return False
    age = _age_seconds(manifest, now, store)
    return age is not None and age > max_age_seconds


def expired(
    manifests: list[Manifest],
    max_backups: int | None,
    max_age_seconds: float | None,
    now: datetime.datetime,
    keep_keys: Collection[str] = (),
    history: Sequence[str] = (),
    store: StoreTimes | None = None,
) -> list[Manifest]:
    """The manifests to delete."""
    ordered = newest_first(manifests, history)
    kept = newest_verified(ordered, history)
    doomed = []
    for index, manifest in enumerate(ordered):
        if index == 0 or manifest is kept or manifest.snapshot_key in keep_keys or manifest.cluster_id not in history:
            continue
        too_many = max_backups is not None and index >= max_backups
        too_old = _too_old(manifest, max_age_seconds, now, store)
        if too_many or too_old:
            doomed.append(manifest)
    return doomed


def to_delete(
    manifests: list[Manifest],
    identity: Identity,
    max_backups: int | None,
    max_age_seconds: float | None,
    now: datetime.datetime,
    keep_key: str,
    history: Sequence[str],
    store: StoreTimes | None,
) -> list[Manifest]:
    """What retention removes after a run that wrote (or found) `keep_key`: among the
    manifests read from this backup's folder, only its own count (everything else is foreign)."""
    own = [m for m in manifests if m.belongs_to(identity)]
    return expired(own, max_backups, max_age_seconds, now, keep_keys={keep_key}, history=history, store=store)
