"""Aborts the multipart uploads earlier runs left unfinished: those status recorded, by
their exact key and ID, and the orphans backup/orphans.py picks among those the store lists."""

from __future__ import annotations

import logging
from collections.abc import Collection

from etcd_operator.clients.storage.s3 import S3Storage, StorageError
from etcd_operator.core.backup import orphans

logger = logging.getLogger(__name__)


async def abort_recorded(storage: S3Storage, pending: list[dict[str, str]]) -> None:
    """Aborts each upload in `pending` ({key, uploadId}, from status) and drops it from the
    list only once the store has answered for it."""
    for upload in list(pending):
        await _abort(storage, upload["key"], upload["uploadId"])
        pending.remove(upload)


async def abort_orphans(
    storage: S3Storage, folder: str, slot_key: str, recorded_ids: Collection[str], grace_seconds: float
) -> None:
    """Lists the uploads of this backup's folder (and what orphans.listing_prefixes adds),
    and aborts those orphans.orphaned picks."""
    listed, store_now = await storage.list_uploads(folder)
    for prefix in orphans.listing_prefixes(bool(listed), slot_key):
        more, answered_at = await storage.list_uploads(prefix)
        listed, store_now = listed + more, answered_at or store_now
    found = {upload_id: orphans.Upload(key, upload_id, initiated) for key, upload_id, initiated in listed}
    for upload in orphans.orphaned(found.values(), folder, recorded_ids, store_now, grace_seconds):
        await _abort(storage, upload.key, upload.upload_id)
        logger.info(
            "aborted orphaned multipart upload %s (%s, initiated %s)",
            upload.key,
            upload.upload_id,
            upload.initiated.isoformat(),
        )


async def _abort(storage: S3Storage, key: str, upload_id: str) -> None:
    try:
        await storage.abort_multipart(key, upload_id)
    except StorageError as e:
        if not orphans.already_gone(e.code):
            raise
