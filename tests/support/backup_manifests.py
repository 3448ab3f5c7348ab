"""Manifests of stored snapshots and segments for the pure tests of backup and restore: the
fields a test does not name carry values no check reads."""

from __future__ import annotations

import hashlib

from etcd_operator.core.backup.manifest import Manifest
from etcd_operator.core.backup.segments import SegmentManifest, segment_key

SEGMENT_BYTES = b"abc"  # the stored bytes every segment manifest below describes
CREATED_AT = "2026-11-27T00:00:00Z"


def snapshot_manifest(
    revision: int,
    *,
    cluster_id: str = "c1",
    folder: str = "p/ns/b/",
    backup: str = "b",
    etcd_version: str = "3.6.0",
    verified: bool | None = True,
) -> Manifest:
    return Manifest(
        snapshot_key=f"{folder}s{revision}.db",
        backup=backup,
        namespace="ns",
        cluster="etcd",
        cluster_id=cluster_id,
        etcd_version=etcd_version,
        revision=revision,
        size=1,
        sha256="ab" * 32,
        created_at=CREATED_AT,
        member="m",
        slot=f"s{revision}",
        backup_uid="u",
        verified=verified,
    )


def segment_manifest(
    chain: str,
    sequence: int,
    first: int,
    last: int,
    *,
    cluster_id: str = "c1",
    seen: float | None = None,
    backup: str = "b",
    base_revision: int = 0,
    base_key: str = "base",
) -> SegmentManifest:
    """Segment `sequence` of `chain`, revisions first..last, one event each, the first seen at
    `seen` (default: its revision number, in seconds) and one more each second."""
    seen_at = float(first) if seen is None else seen
    return SegmentManifest(
        segment_key=segment_key("p", "ns", backup, chain, sequence, first, last),
        backup=backup,
        namespace="ns",
        backup_uid="u",
        cluster_id=cluster_id,
        chain=chain,
        base_revision=base_revision,
        base_key=base_key,
        sequence=sequence,
        first_revision=first,
        last_revision=last,
        revisions=last - first + 1,
        events=last - first + 1,
        first_seen_at=seen_at,
        last_seen_at=seen_at + (last - first),
        size=len(SEGMENT_BYTES),
        sha256=hashlib.sha256(SEGMENT_BYTES).hexdigest(),
        created_at=CREATED_AT,
    )
