"""How a point-in-time restore stores the snapshot it replays: sealed like the backup's own
objects (core/backup/sealed.py), never in clear what was stored encrypted. Pure.

- Encrypted whenever anything it is made of is (the base snapshot, a segment): under the key
  ID of the newest encrypted one, so the keys that decrypted the replay's inputs (the
  restore's Secret, mounted in the replay pod) decrypt its output for the verification and
  the seed pods too; else, when the backup encrypts (spec.encryption), under its key ID.
- Compressed as the backup's spec.compression says (zstd by default).
The replay pod gets the compression and the key ID in its environment; the key itself only
from the mounted Secret."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from etcd_operator.core.backup.manifest import Manifest
from etcd_operator.core.backup.segments import SegmentManifest

ENCRYPTION = "aes-256-gcm"


@dataclasses.dataclass(frozen=True)
class ReplayedSealing:
    compression: str = "zstd"
    key_id: str = ""  # "": not encrypted

    @property
    def encrypted(self) -> bool:
        return bool(self.key_id)


DEFAULT_SEALING = ReplayedSealing()


def newest_encrypted_key_id(base: Manifest | None, segments: Sequence[SegmentManifest]) -> str | None:
    """The key ID of the newest encrypted input (the last segment first, the base last)."""
    for segment in sorted(segments, key=lambda m: m.sequence, reverse=True):
        if segment.encrypted:
            return segment.key_id or ""
    if base is not None and base.encryption and base.encryption != "none":
        return base.key_id or ""
    return None


def replayed_sealing(
    compression: str | None,
    backup_key_id: str | None,
    base: Manifest | None,
    segments: Sequence[SegmentManifest],
) -> ReplayedSealing:
    """`compression`, `backup_key_id`: the backup's spec.compression and spec.encryption.keyID."""
    key_id = newest_encrypted_key_id(base, segments)
    return ReplayedSealing(compression or "zstd", key_id if key_id is not None else backup_key_id or "")
