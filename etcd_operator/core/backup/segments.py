"""Continuous backup: the revisions a watch saw after a full snapshot, cut into segments.
Pure: a segment's body (its codec), its manifest, and its object names.

A chain starts at a full snapshot (its base) and holds every revision after it, with no
gap: segment 1 starts at base + 1, and each next one at the previous one's last + 1. A
watch on the whole keyspace sees every revision, since every revision changes at least one
key. Each revision is kept whole (all its changes), so that a replay can apply it as one
transaction and land on the same revision number. `seen_at` is the writer's clock when the
watch delivered the revision: what a restore "to a time" goes by.

Every lease a put in a segment uses is recorded in the first segment that uses it: with
its granted TTL, or as gone (granted once, revoked or expired before the writer could ask:
a lock or election session of under a second). A replay grants a gone lease with
GONE_LEASE_TTL; the deletions its revocation made are later revisions of the chain (etcd
sends them down the watch like any delete), so the replay deletes its keys where the source
did. A lease the writer could not learn at all breaks the chain (continuous.LEASE_UNKNOWN).

Body layout (big-endian), written once and read whole (a segment is at most a few MiB):
    MAGIC
    b"L" lease(int64) ttl(int64)                      a lease first used in this segment
    b"G" lease(int64)                                 one first used here that was gone (revoked
                                                      or expired) when the writer asked its TTL
    b"R" revision(int64) seen_at(float64) changes(uint32)
         then per change: kind(uint8) lease(int64) key_len(uint32) value_len(uint32) key value
    b"E" revisions(uint32)                            the end; a body without it is truncated
"""

from __future__ import annotations

import dataclasses
import hashlib
import struct
from collections.abc import Iterable, Mapping

from etcd_operator.core.backup.manifest import authenticate, backup_prefix, document_fields, document_json

MAGIC = b"etcd-operator.segment/v1\n"
FORMAT = "etcd-operator.segment-manifest/v1"
SEGMENT_SUFFIX = ".segment"
SEGMENT_MANIFEST_SUFFIX = ".segment.json"
SEGMENTS_DIR = "segments"

PUT, DELETE = 0, 1
# The TTL a replay grants a lease recorded as gone: short, so that a restored cluster soon
# drops the keys of a session that no longer exists (a lock's holder, an election's leader).
GONE_LEASE_TTL = 10
_LEASE = struct.Struct(">qq")
_GONE_LEASE = struct.Struct(">q")
_REVISION = struct.Struct(">qdI")
_CHANGE = struct.Struct(">BqII")
_END = struct.Struct(">I")


class SegmentCorrupt(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class KeyChange:
    key: bytes
    value: bytes | None  # None: the key was deleted
    lease: int = 0  # the lease the key was put with; 0 for none

    @property
    def deleted(self) -> bool:
        return self.value is None


@dataclasses.dataclass(frozen=True)
class RevisionRecord:
    revision: int
    seen_at: float  # seconds since the epoch, on the writer's clock
    changes: tuple[KeyChange, ...]


@dataclasses.dataclass(frozen=True)
class SegmentBody:
    revisions: tuple[RevisionRecord, ...]
    leases: tuple[tuple[int, int], ...] = ()  # (lease ID, granted TTL in seconds), first used here
    gone_leases: tuple[int, ...] = ()  # lease IDs first used here, gone when the writer asked

    @property
    def lease_ttls(self) -> dict[int, int]:
        """The TTL a replay grants each lease this segment records."""
        return {**dict.fromkeys(self.gone_leases, GONE_LEASE_TTL), **dict(self.leases)}

    @property
    def events(self) -> int:
        return sum(len(r.changes) for r in self.revisions)


def encode(body: SegmentBody) -> bytes:
    out = bytearray(MAGIC)
    for lease, ttl in body.leases:
        out += b"L" + _LEASE.pack(lease, ttl)
    for lease in body.gone_leases:
        out += b"G" + _GONE_LEASE.pack(lease)
    previous = None
    for record in body.revisions:
        if previous is not None and record.revision != previous + 1:
            raise ValueError(f"revisions must follow one another: {record.revision} after {previous}")
        if not record.changes:
            raise ValueError(f"revision {record.revision} has no change")
        previous = record.revision
        out += b"R" + _REVISION.pack(record.revision, record.seen_at, len(record.changes))
        for change in record.changes:
            value = b"" if change.value is None else change.value
            kind = DELETE if change.value is None else PUT
            out += _CHANGE.pack(kind, change.lease, len(change.key), len(value)) + change.key + value
    out += b"E" + _END.pack(len(body.revisions))
    return bytes(out)


def decode(data: bytes) -> SegmentBody:
    """Raises SegmentCorrupt for anything `encode` did not write whole."""
    if not data.startswith(MAGIC):
        raise SegmentCorrupt("not an etcd-operator segment")
    view = memoryview(data)
    at = len(MAGIC)
    leases: list[tuple[int, int]] = []
    gone: list[int] = []
    revisions: list[RevisionRecord] = []

    def take(n: int) -> memoryview:
        nonlocal at
        if at + n > len(view):
            raise SegmentCorrupt("segment is truncated")
        chunk = view[at : at + n]
        at += n
        return chunk

    while True:
        tag = bytes(take(1))
        if tag == b"L":
            lease, ttl = _LEASE.unpack(take(_LEASE.size))
            leases.append((lease, ttl))
        elif tag == b"G":
            (lease,) = _GONE_LEASE.unpack(take(_GONE_LEASE.size))
            gone.append(lease)
        elif tag == b"R":
            revision, seen_at, count = _REVISION.unpack(take(_REVISION.size))
            if revisions and revision != revisions[-1].revision + 1:
                raise SegmentCorrupt(f"revision {revision} follows {revisions[-1].revision}")
            changes = []
            for _ in range(count):
                kind, lease, key_len, value_len = _CHANGE.unpack(take(_CHANGE.size))
                key = bytes(take(key_len))
                value = bytes(take(value_len))
                if kind not in (PUT, DELETE):
                    raise SegmentCorrupt(f"unknown change kind {kind} at revision {revision}")
                changes.append(KeyChange(key, None if kind == DELETE else value, lease))
            revisions.append(RevisionRecord(revision, seen_at, tuple(changes)))
        elif tag == b"E":
            (count,) = _END.unpack(take(_END.size))
            if count != len(revisions) or at != len(view):
                raise SegmentCorrupt("segment end does not match its content")
            return SegmentBody(tuple(revisions), tuple(leases), tuple(gone))
        else:
            raise SegmentCorrupt(f"unknown record {tag!r}")


@dataclasses.dataclass(frozen=True)
class SegmentManifest:
    """Written beside each segment, after it. A segment without one was never finished."""

    segment_key: str
    backup: str
    namespace: str
    backup_uid: str
    cluster_id: str
    chain: str  # chain_id(): the cluster and the base revision the chain started from
    base_revision: int
    base_key: str  # the full snapshot the chain started from
    sequence: int  # 1 for the first segment of a chain
    first_revision: int
    last_revision: int
    revisions: int
    events: int
    first_seen_at: float
    last_seen_at: float
    size: int  # bytes stored
    sha256: str  # of the bytes stored
    created_at: str  # RFC 3339, UTC
    # How the body is stored (core/backup/segment_sealing.py); absent: plain, as segments
    # were written before they were sealed.
    compression: str | None = None  # zstd or none
    encryption: str | None = None  # aes-256-gcm, or None
    key_id: str | None = None  # the key ID in the backup's encryption Secret
    # etcd's auth revision, read from the watched member when the segment was cut: at or
    # after every revision it holds (the KV watch carries no auth change). None: not read.
    auth_revision: int | None = None

    @property
    def key(self) -> str:
        return self.segment_key.removesuffix(SEGMENT_SUFFIX) + SEGMENT_MANIFEST_SUFFIX

    @property
    def encrypted(self) -> bool:
        return bool(self.encryption) and self.encryption != "none"

    def to_json(self, backup_key: bytes | None = None) -> bytes:
        """`backup_key`: the key of `key_id`, for an encrypted backup: the document carries a
        MAC (core/backup/manifest.py)."""
        return document_json(FORMAT, self, self.key, backup_key)

    @classmethod
    def from_json(cls, data: bytes) -> SegmentManifest:
        """Raises ValueError for anything this operator did not write."""
        fields = document_fields(cls, data, FORMAT, "segment manifest")
        for name in ("base_revision", "sequence", "first_revision", "last_revision", "revisions", "events", "size"):
            fields[name] = int(fields[name])
        for name in ("first_seen_at", "last_seen_at"):
            fields[name] = float(fields[name])
        if fields.get("auth_revision") is not None:
            fields["auth_revision"] = int(fields["auth_revision"])
        return cls(**fields)

    @classmethod
    def read(cls, data: bytes, path: str, keys: Mapping[str, bytes]) -> SegmentManifest:
        """The manifest stored at `path`, authenticated under one of `keys` when any are given.
        Raises manifest.ManifestUnauthenticated, or ValueError as `from_json`."""
        authenticate(data, path, keys)
        return cls.from_json(data)

    def checks(self, stored: bytes) -> str | None:
        """Why `stored` is not this manifest's segment; None when it is."""
        if len(stored) != self.size:
            return f"{self.segment_key}: {len(stored)} bytes, manifest says {self.size}"
        if hashlib.sha256(stored).hexdigest() != self.sha256:
            return f"{self.segment_key}: sha256 differs from its manifest"
        return None


def chain_id(cluster_id: str, base_revision: int) -> str:
    return f"{cluster_id}-{base_revision:020d}"


def segments_prefix(prefix: str, namespace: str, backup: str) -> str:
    return f"{backup_prefix(prefix, namespace, backup)}{SEGMENTS_DIR}/"


def segment_key(prefix: str, namespace: str, backup: str, chain: str, sequence: int, first: int, last: int) -> str:
    """Names sort by chain, then sequence; nothing reads order from them (manifests say it)."""
    name = f"{sequence:010d}-{first:020d}-{last:020d}{SEGMENT_SUFFIX}"
    return f"{segments_prefix(prefix, namespace, backup)}{chain}/{name}"


def revisions_of(records: Iterable[RevisionRecord], after: int, up_to: int) -> list[RevisionRecord]:
    """The records with after < revision <= up_to: what a replay from a snapshot at `after`
    applies of one segment."""
    return [r for r in records if after < r.revision <= up_to]


def last_seen_by(records: Iterable[RevisionRecord], moment: float) -> RevisionRecord | None:
    """The newest record the writer had seen at `moment`; None when it had seen none."""
    seen = [r for r in records if r.seen_at <= moment]
    return seen[-1] if seen else None
