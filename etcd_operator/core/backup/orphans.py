"""Which unfinished multipart uploads a backup run aborts. Pure.

An upload is orphaned when the operator stopped between starting it and recording it in
status (status.pendingUploads), or lost that record: no run ever resumes an upload, each
starts its own. A run aborts an upload only when all of these hold:
- its key is a snapshot key directly in this backup's own folder (backup_prefix): deeper
  folders belong to other backups, and other prefixes are never touched;
- it is not an upload status records in progress (those are aborted by their exact ID);
- the store says it is older than the grace: its Initiated time and the store's own time
  when it listed it, both from the store's one clock. Without the store's time, none is.

Invariants, each covered by tests/unit/test_backup_orphans.py."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Collection, Iterable

from etcd_operator.core.backup.manifest import SNAPSHOT_SUFFIX

DEFAULT_GRACE_SECONDS = 3600.0
# An abort answered with one of these: the upload is gone already (finished or aborted).
GONE_CODES = ("NoSuchUpload", "404", "NoSuchKey")


@dataclasses.dataclass(frozen=True)
class Upload:
    key: str
    upload_id: str
    initiated: datetime.datetime  # the store's clock


def already_gone(error_code: str) -> bool:
    return error_code in GONE_CODES


def listing_prefixes(folder_listed_any: bool, slot_key: str) -> list[str]:
    """What is listed after the folder itself: the slot's own key, and, when the folder
    listed nothing, the bucket without a prefix (MinIO lists uploads by exact key only, and
    without a prefix those started since it started; orphaned keeps only this folder's)."""
    return [slot_key] if folder_listed_any else [slot_key, ""]


def in_folder(key: str, folder: str) -> bool:
    """A snapshot key directly in `folder` (not in a deeper one)."""
    rest = key[len(folder) :] if key.startswith(folder) else ""
    return bool(rest) and "/" not in rest and rest.endswith(SNAPSHOT_SUFFIX)


def orphaned(
    uploads: Iterable[Upload],
    folder: str,
    recorded_ids: Collection[str],
    store_now: datetime.datetime | None,
    grace_seconds: float,
) -> list[Upload]:
    if store_now is None:
        return []
    return [
        u
        for u in uploads
        if in_folder(u.key, folder)
        and u.upload_id not in recorded_ids
        and (store_now - u.initiated).total_seconds() >= grace_seconds
    ]
