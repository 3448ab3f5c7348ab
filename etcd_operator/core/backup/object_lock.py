"""S3 Object Lock and retention: which expired backups may be deleted now, and which the
store holds. Pure: the store's answers (storage/s3.py, `S3Storage.stored`) come in as data.

A bucket with Object Lock keeps versions: a plain DELETE only hides an object behind a
delete marker and leaves its data. So retention deletes every version of a backup's two
keys by version ID, or none of them:
- a version is held while it has a legal hold, or its retain-until date has not passed on
  both clocks, the store's (its Date header when it answered) and this operator's: a skewed
  clock can only keep a backup longer, as for retention's maxAge. The date itself has not
  passed (the store's Date has whole seconds). Without the store's time, a dated lock
  counts as held;
- a backup is kept whole when any version of its snapshot or its manifest is held: a
  manifest without its snapshot, or the reverse, would be an orphan (orphans.py). Nothing of
  it is deleted or even attempted; it is reported, with the latest date it is held to;
- a backup none of whose versions is held is deleted, snapshot first, then its manifest
  (as before Object Lock: an operator killed in between leaves a manifest the next pass
  deletes), each version by its ID; a bucket without versions (no version IDs) gets one
  plain DELETE per key, as before;
- a continuous backup's segment retention no longer needs (segment_retention.py) goes the
  same way, its manifest first, then its body (segment_deletions): every version by its ID,
  or, while any version of either is held, nothing; a later pass deletes it.

Invariants, each covered by tests/unit/test_backup_object_lock.py."""

from __future__ import annotations

import dataclasses
import datetime
import math
from collections.abc import Mapping, Sequence
from typing import Any

from etcd_operator.core.backup.manifest import Ignored, Manifest
from etcd_operator.core.durations import parse_duration
from etcd_operator.core.timefmt import format_time

LOCKED_IN_STATUS = 10  # status.retention.locked lists at most this many (the earliest to go first)
MODES = ("GOVERNANCE", "COMPLIANCE")


@dataclasses.dataclass(frozen=True)
class Lock:
    """One version's Object Lock as the store reported it (nothing set: not locked)."""

    mode: str = ""  # GOVERNANCE or COMPLIANCE
    retain_until: datetime.datetime | None = None
    legal_hold: bool = False


@dataclasses.dataclass(frozen=True)
class StoredVersion:
    version_id: str | None  # None: the bucket keeps no versions (a plain DELETE removes it)
    lock: Lock = Lock()


@dataclasses.dataclass(frozen=True)
class StoredObject:
    """What the store holds under one key when asked: every version (delete markers too),
    and its own time when it answered. No versions: nothing is stored under the key."""

    key: str
    versions: tuple[StoredVersion, ...] = ()
    store_now: datetime.datetime | None = None


@dataclasses.dataclass(frozen=True)
class LockedBackup:
    """An expired backup the store still holds. `retain_until`: the latest date among its
    held versions (None when only a legal hold keeps it)."""

    snapshot_key: str
    mode: str
    retain_until: datetime.datetime | None
    legal_hold: bool

    def status_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {"key": self.snapshot_key}
        if self.mode:
            record["mode"] = self.mode
        if self.retain_until is not None:
            record["retainUntil"] = _text(self.retain_until)
        if self.legal_hold:
            record["legalHold"] = True
        return record


@dataclasses.dataclass(frozen=True)
class Deletion:
    """One key's versions to delete, in order."""

    key: str
    version_ids: tuple[str | None, ...]


@dataclasses.dataclass(frozen=True)
class RetentionPlan:
    deletions: tuple[tuple[Manifest, tuple[Deletion, ...]], ...] = ()  # per backup: snapshot, then manifest
    locked: tuple[LockedBackup, ...] = ()


@dataclasses.dataclass(frozen=True)
class RetentionResult:
    """What a retention pass did: the backups it deleted, the expired ones the store holds, and
    the manifests it left out of its choice because they did not authenticate."""

    deleted: tuple[Manifest, ...] = ()
    locked: tuple[LockedBackup, ...] = ()
    ignored: tuple[Ignored, ...] = ()  # manifests that did not authenticate: never deleted on their word


def held(lock: Lock, store_now: datetime.datetime | None, now: datetime.datetime) -> bool:
    if lock.legal_hold:
        return True
    if lock.retain_until is None:
        return False
    if store_now is None:
        return True
    return lock.retain_until >= store_now or lock.retain_until >= now


def _locked(manifest: Manifest, objects: Sequence[StoredObject], now: datetime.datetime) -> LockedBackup | None:
    holds = [v.lock for o in objects for v in o.versions if held(v.lock, o.store_now, now)]
    if not holds:
        return None
    dates = [lock.retain_until for lock in holds if lock.retain_until is not None]
    modes = sorted({lock.mode for lock in holds if lock.mode})
    return LockedBackup(
        snapshot_key=manifest.snapshot_key,
        mode=modes[0] if len(modes) == 1 else "/".join(modes),
        retain_until=max(dates) if dates else None,
        legal_hold=any(lock.legal_hold for lock in holds),
    )


def _deletion(stored: StoredObject) -> Deletion:
    return Deletion(stored.key, tuple(v.version_id for v in stored.versions))


def segment_deletions(stored: Sequence[StoredObject], now: datetime.datetime) -> tuple[Deletion, ...] | None:
    """The versions to delete of one segment's keys as `stored` lists them (its manifest, then
    its body), each by its ID; None while any of them is held: the segment is kept whole."""
    if any(held(v.lock, o.store_now, now) for o in stored for v in o.versions):
        return None
    return tuple(_deletion(o) for o in stored if o.versions)


def sort_out(expired: Sequence[Manifest], stored: Mapping[str, StoredObject], now: datetime.datetime) -> RetentionPlan:
    """`expired`: what retention.to_delete picked; `stored`: what the store holds under each
    one's snapshot and manifest keys (a key missing from it: nothing stored there)."""
    deletions, locked = [], []
    for manifest in expired:
        objects = [stored.get(key) or StoredObject(key) for key in (manifest.snapshot_key, manifest.key)]
        lock = _locked(manifest, objects, now)
        if lock is not None:
            locked.append(lock)
        else:
            deletions.append((manifest, tuple(_deletion(o) for o in objects if o.versions)))
    return RetentionPlan(tuple(deletions), tuple(sorted(locked, key=_earliest_first)))


def _earliest_first(lock: LockedBackup) -> tuple[bool, datetime.datetime, str]:
    """By retain-until date; legal holds alone (no date) last."""
    far = datetime.datetime.max.replace(tzinfo=datetime.UTC)
    return lock.retain_until is None, lock.retain_until or far, lock.snapshot_key


def status_fields(locked: Sequence[LockedBackup]) -> dict[str, Any] | None:
    """status.retention after a run: the expired backups the store holds, earliest to go
    first (bounded), and how many there are; None (removed) when there are none."""
    if not locked:
        return None
    ordered = sorted(locked, key=_earliest_first)
    return {"lockedCount": len(ordered), "locked": [lock.status_record() for lock in ordered[:LOCKED_IN_STATUS]]}


def summary(retention: Mapping[str, Any] | None) -> str:
    """For people, from status.retention: how many expired backups Object Lock keeps, and
    when the first may go."""
    count = int((retention or {}).get("lockedCount") or 0)
    if not count:
        return ""
    first = (retention or {}).get("locked", [{}])[0]
    kept = f"{count} expired backup{'s' if count != 1 else ''} kept by S3 Object Lock"
    if not first.get("retainUntil"):
        return f"{kept}, each under a legal hold until it is removed"
    return f"{kept}; the earliest may be deleted after {first['retainUntil']}"


@dataclasses.dataclass(frozen=True)
class UploadLock:
    """spec.storage.s3.objectLock: a retention to set on every object a backup uploads."""

    mode: str
    period_seconds: float

    @classmethod
    def from_dict(cls, spec: Mapping[str, object] | None) -> UploadLock | None:
        if not spec:
            return None
        mode, period = str(spec.get("mode") or ""), str(spec.get("retainFor") or "")
        if mode not in MODES or not period:
            raise ValueError(f"objectLock needs a mode ({' or '.join(MODES)}) and retainFor, got {dict(spec)!r}")
        return cls(mode, parse_duration(period))

    def retain_until(self, now: datetime.datetime) -> datetime.datetime:
        return now + datetime.timedelta(seconds=self.period_seconds)


def _text(moment: datetime.datetime) -> str:
    """Whole seconds, rounded up: never a moment before the lock ends."""
    return format_time(math.ceil(moment.timestamp()))
