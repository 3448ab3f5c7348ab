"""Which snapshots a retention policy deletes. Pure: works on manifests only."""

from __future__ import annotations

import datetime

from etcd_operator.backup.manifest import Manifest


def _created(manifest: Manifest) -> datetime.datetime:
    return datetime.datetime.fromisoformat(manifest.created_at.replace("Z", "+00:00"))


def newest_first(manifests: list[Manifest]) -> list[Manifest]:
    """By creation time, then revision; never by key (names sort wrongly, see coreos#2113)."""
    return sorted(manifests, key=lambda m: (_created(m), m.revision), reverse=True)


def expired(manifests: list[Manifest], max_backups: int | None, max_age_seconds: float | None,
            now: datetime.datetime) -> list[Manifest]:
    """The manifests to delete. The newest one is always kept, whatever the policy."""
    ordered = newest_first(manifests)
    doomed = []
    for index, manifest in enumerate(ordered):
        if index == 0:
            continue
        too_many = max_backups is not None and index >= max_backups
        too_old = max_age_seconds is not None and (now - _created(manifest)).total_seconds() > max_age_seconds
        if too_many or too_old:
            doomed.append(manifest)
    return doomed
