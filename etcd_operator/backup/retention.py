"""Which snapshots a retention policy deletes, and which backup is the newest. Pure: works
on manifests only, never on object names (names sort wrongly, see coreos#2113).

Order: within one source cluster ID, by revision (a writer's clock may run ahead; etcd's
revision never goes back). Between cluster IDs (before and after a restore) revisions
mean nothing, so their lineages are ordered by the creation time of each one's newest
backup by revision.

Invariants, each covered by tests/unit/test_backup_logic.py:
- the newest backup is never deleted, nor the newest verified one;
- a key the caller names as kept (the one just written) is never deleted;
- only the manifests passed in are considered: the caller passes this backup's own."""

from __future__ import annotations

import datetime
from typing import Collection

from etcd_operator.backup.manifest import Manifest


def _created(manifest: Manifest) -> datetime.datetime:
    return datetime.datetime.fromisoformat(manifest.created_at.replace("Z", "+00:00"))


def _by_revision(manifest: Manifest) -> tuple[int, datetime.datetime, str]:
    return manifest.revision, _created(manifest), manifest.snapshot_key


def newest_first(manifests: list[Manifest]) -> list[Manifest]:
    lineages: dict[str, list[Manifest]] = {}
    for manifest in manifests:
        lineages.setdefault(manifest.cluster_id, []).append(manifest)
    for members in lineages.values():
        members.sort(key=_by_revision, reverse=True)
    ordered = sorted(lineages.values(), key=lambda members: (_created(members[0]), members[0].cluster_id),
                     reverse=True)
    return [manifest for members in ordered for manifest in members]


def newest_verified(manifests: list[Manifest]) -> Manifest | None:
    return next((m for m in newest_first(manifests) if m.verified), None)


def expired(manifests: list[Manifest], max_backups: int | None, max_age_seconds: float | None,
            now: datetime.datetime, keep_keys: Collection[str] = ()) -> list[Manifest]:
    """The manifests to delete."""
    ordered = newest_first(manifests)
    kept = newest_verified(ordered)
    doomed = []
    for index, manifest in enumerate(ordered):
        if index == 0 or manifest is kept or manifest.snapshot_key in keep_keys:
            continue
        too_many = max_backups is not None and index >= max_backups
        too_old = max_age_seconds is not None and (now - _created(manifest)).total_seconds() > max_age_seconds
        if too_many or too_old:
            doomed.append(manifest)
    return doomed
