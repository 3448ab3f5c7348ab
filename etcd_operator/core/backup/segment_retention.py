"""Which segments of a continuous backup retention deletes, and what a segment's object name
says. Pure: decisions are made on manifests; names only pick which manifests to read.

A segment is needed while some kept snapshot can start a replay through it: a point after a
kept snapshot S of one cluster is reached by the segments after S's revision. So a segment
is deleted only when it lies wholly at or below the oldest kept snapshot's revision of its
cluster, or when its cluster has no kept snapshot at all (nothing can replay it). The
segments of the newest chain are never deleted.

Invariant (tests/unit/test_backup_continuous.py): every revision a replay reached from a
kept snapshot before retention is still reached after it; deleting a chain's oldest
segments leaves a run that starts at or before the oldest kept snapshot's revision + 1."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from etcd_operator.core.backup.manifest import Manifest
from etcd_operator.core.backup.segments import SEGMENT_MANIFEST_SUFFIX, SegmentManifest

_NAME = re.compile(r"(?P<chain>[^/]+)/(?P<sequence>\d{10})-(?P<first>\d{20})-(?P<last>\d{20})$")


def parse_manifest_key(segments_prefix: str, key: str) -> tuple[str, int, int, int] | None:
    """(chain, sequence, first, last) from a segment manifest's key under `segments_prefix`;
    None for any other key."""
    if not key.startswith(segments_prefix) or not key.endswith(SEGMENT_MANIFEST_SUFFIX):
        return None
    match = _NAME.fullmatch(key[len(segments_prefix) : -len(SEGMENT_MANIFEST_SUFFIX)])
    if match is None:
        return None
    return match["chain"], int(match["sequence"]), int(match["first"]), int(match["last"])


def chain_cluster_id(chain: str) -> str:
    """The cluster ID a chain's name (segments.chain_id) starts with."""
    return chain.rsplit("-", 1)[0]


def oldest_kept(snapshots: Iterable[Manifest]) -> dict[str, int]:
    """Per cluster ID, the revision of its oldest kept snapshot that may be a replay's base."""
    oldest: dict[str, int] = {}
    for snapshot in snapshots:
        if snapshot.verified is False:
            continue
        known = oldest.get(snapshot.cluster_id)
        oldest[snapshot.cluster_id] = snapshot.revision if known is None else min(known, snapshot.revision)
    return oldest


def may_delete(segment_chain: str, cluster_id: str, last_revision: int, kept: dict[str, int], newest: str) -> bool:
    """Whether a segment (of `segment_chain` and `cluster_id`, ending at `last_revision`) is
    needed by no kept snapshot; `kept` is oldest_kept(); `newest` the chain being written."""
    if segment_chain == newest:
        return False
    floor = kept.get(cluster_id)
    return floor is None or last_revision <= floor


def segments_to_delete(
    kept_snapshots: Sequence[Manifest], segments: Sequence[SegmentManifest], newest_chain: str
) -> list[SegmentManifest]:
    kept = oldest_kept(kept_snapshots)
    return [s for s in segments if may_delete(s.chain, s.cluster_id, s.last_revision, kept, newest_chain)]
