"""The small JSON document written beside every snapshot. Retention and restore trust
only what manifests say, never object names.

A manifest names the EtcdBackup that wrote it (namespace, name, UID) and the source
cluster's ID. Only manifests of this backup's own identity count for it (retention,
"this slot already ran"); anything else under its prefix is foreign and never touched.
Manifests written before identities existed have no UID: they stay readable (restore can
still pick them by name), but they match no identity, so retention never deletes them and
they never count as a finished slot of a current backup.

Authentication: the manifests of an encrypted backup (snapshot and segment manifests alike)
carry `mac`, an HMAC-SHA256 under a key derived from the backup key named by their `keyId`
(HKDF-SHA256, info MAC_KEY_INFO), over the name the manifest is stored at and the document
without `mac`. A reader that holds keys refuses a manifest whose MAC is missing or wrong
(ManifestUnauthenticated): one rewritten, one made up, or one copied from another name or
another backup under the same key. The sha256 it records then pins the object beside it."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

FORMAT = "etcd-operator.snapshot/v1"
WRITER = "etcd-operator"
MANIFEST_SUFFIX = ".manifest.json"
SNAPSHOT_SUFFIX = ".db"
MAC_FIELD = "mac"
MAC_KEY_INFO = b"etcd-operator manifest mac v1"


@dataclasses.dataclass(frozen=True)
class Manifest:
    snapshot_key: str
    backup: str
    namespace: str
    cluster: str
    cluster_id: str
    etcd_version: str
    revision: int
    size: int
    sha256: str
    created_at: str  # RFC 3339, UTC
    member: str
    slot: str
    # Optional: absent from manifests written by older versions.
    backup_uid: str = ""  # "" matches no identity
    key_count: int | None = None  # keys at `revision` in the source, right after the snapshot
    hash_kv: int | None = None  # the source's HashKV at `revision`
    compact_revision: int | None = None  # the source's compaction point when that hash was taken
    verified: bool | None = None  # None: never verified; False: a verification failed
    verified_at: str | None = None
    verification: dict[str, Any] | None = None  # what the scratch member answered, and why it failed
    # How the object is stored (core/backup/sealed.py); absent: plain, as before the format.
    # `size` and `sha256` are always of the stored bytes, what a restore pod re-checks.
    compression: str | None = None  # zstd or none
    encryption: str | None = None  # aes-256-gcm, or None
    key_id: str | None = None  # the key ID in the encryption Secret
    plain_size: int | None = None  # bytes of the snapshot itself
    # etcd's auth revision, read from the source member before the snapshot: the snapshot's
    # auth store is at least this new. None: not read (older versions, or the member refused).
    # A replayed snapshot (programs/replay.py) never carries it: its keys are the source's at
    # `revision`, its users, roles and auth switch are not (see base_auth_revision).
    auth_revision: int | None = None
    # A replayed snapshot only: the auth revision of the users, roles and auth switch it
    # holds, which are its base snapshot's (a replay applies key revisions only), as its
    # scratch member answered before the replay and again before the snapshot. Never the
    # source's auth revision at `revision`. None: not read, or the two reads differed.
    base_auth_revision: int | None = None

    def belongs_to(self, identity: Identity) -> bool:
        return (self.namespace, self.backup, self.backup_uid) == (
            identity.namespace,
            identity.backup,
            identity.uid,
        ) and bool(identity.uid)

    def foreign_slot(self, identity: Identity, manifest_path: str) -> str | None:
        """Why the slot this manifest (read from `manifest_path`) fills is not run by
        `identity`: another backup wrote it. None when it is the identity's own: that slot ran."""
        if self.belongs_to(identity):
            return None
        return (
            f"{manifest_path} was written by {self.namespace}/{self.backup} "
            f"(uid {self.backup_uid or 'none'}), not by this EtcdBackup; "
            "it is left untouched and this slot is not run"
        )

    @property
    def key(self) -> str:
        return manifest_key(self.snapshot_key)

    def to_json(self, backup_key: bytes | None = None) -> bytes:
        """`backup_key`: the key of `key_id`, for an encrypted backup: the document carries a MAC."""
        return document_json(FORMAT, self, self.key, backup_key)

    @classmethod
    def from_json(cls, data: bytes) -> Manifest:
        """Raises ValueError for anything this operator did not write. Unauthenticated: what
        decides a restore or a verification reads through `read`."""
        fields = document_fields(cls, data, FORMAT, "snapshot manifest")
        fields["revision"], fields["size"] = int(fields["revision"]), int(fields["size"])
        for name in ("auth_revision", "base_auth_revision"):
            if fields.get(name) is not None:
                fields[name] = int(fields[name])
        return cls(**fields)

    @classmethod
    def read(cls, data: bytes, path: str, keys: Mapping[str, bytes]) -> Manifest:
        """The manifest stored at `path`, authenticated under one of `keys` when any are given.
        Raises ManifestUnauthenticated, or ValueError as `from_json`."""
        authenticate(data, path, keys)
        return cls.from_json(data)

    def status_record(self) -> dict[str, Any]:
        return {
            "key": self.snapshot_key,
            "manifestKey": self.key,
            "revision": self.revision,
            "size": self.size,
            "sha256": self.sha256,
            "etcdVersion": self.etcd_version,
            "clusterID": self.cluster_id,
            "member": self.member,
            "completionTime": self.created_at,
        } | ({} if self.auth_revision is None else {"authRevision": self.auth_revision})


@dataclasses.dataclass(frozen=True)
class Identity:
    """The EtcdBackup a manifest must name to count as this backup's own."""

    namespace: str
    backup: str
    uid: str


class ManifestUnauthenticated(Exception):
    """A manifest of a backup with a key does not authenticate under it. Not a ValueError:
    readers that skip what is not a manifest must not skip this."""

    def __init__(self, message: str, reason: str = "ManifestUnauthenticated"):
        super().__init__(message)
        self.message = message
        self.reason = reason  # EncryptionKeyMissing: the keys lack the key ID it names


@dataclasses.dataclass(frozen=True)
class Ignored:
    """A manifest a reader holding keys left out of its decisions: it did not authenticate.
    Never deleted on its word, never resumed from, never planned with; reported by its key."""

    key: str
    reason: str  # ManifestUnauthenticated or EncryptionKeyMissing


IGNORED_LISTED = 5  # keys a message names at most


def ignored_reason(ignored: Sequence[Ignored]) -> str:
    """The reason for a refusal the ignored manifests caused: theirs when they agree (a key
    ID the keys lack), else ManifestUnauthenticated."""
    reasons = {i.reason for i in ignored}
    return reasons.pop() if len(reasons) == 1 else "ManifestUnauthenticated"


def ignored_summary(ignored: Sequence[Ignored]) -> str:
    """For a condition or an event: how many manifests were left out, naming the first few."""
    keys = sorted({i.key for i in ignored})
    named = ", ".join(keys[:IGNORED_LISTED])
    if len(keys) > IGNORED_LISTED:
        named += f" and {len(keys) - IGNORED_LISTED} more"
    return (
        f"{len(keys)} manifests do not authenticate under the backup's keys and were ignored (not deleted, "
        f"not resumed from, not restored from): {named}"
    )


def mac_key(backup_key: bytes) -> bytes:
    """The key manifests are authenticated under: never the backup key itself."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=MAC_KEY_INFO).derive(backup_key)


def canonical(document: Mapping[str, Any]) -> bytes:
    """The bytes a manifest's MAC covers of its document: every field but `mac`, sorted, compact."""
    rest = {k: v for k, v in document.items() if k != MAC_FIELD}
    return json.dumps(rest, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


def manifest_mac(backup_key: bytes, path: str, document: Mapping[str, Any]) -> str:
    """HMAC-SHA256 (hex) under mac_key(backup_key) of: the length of `path` (4 bytes,
    big-endian), `path` (UTF-8), canonical(document)."""
    name = path.encode()
    message = struct.pack(">I", len(name)) + name + canonical(document)
    return hmac.new(mac_key(backup_key), message, hashlib.sha256).hexdigest()


def authenticate(data: bytes, path: str, keys: Mapping[str, bytes]) -> None:
    """Raises ManifestUnauthenticated unless the document `data`, read from `path`, carries a
    MAC under the key its keyId names among `keys`. Without keys there is nothing to check."""
    if not keys:
        return
    try:
        document = json.loads(data)
    except (TypeError, ValueError):
        document = None
    if not isinstance(document, dict):
        raise ManifestUnauthenticated(f"{path} is not a JSON document, while the backup has a key")
    mac, key_id = document.get(MAC_FIELD), document.get("keyId")
    if not isinstance(mac, str) or not mac:
        raise ManifestUnauthenticated(
            f"{path} carries no MAC, while the backup has a key: every manifest of an encrypted backup is "
            f"authenticated, so this one was written by someone else"
        )
    key = keys.get(key_id) if isinstance(key_id, str) else None
    if key is None:
        listed = ", ".join(sorted(keys))
        raise ManifestUnauthenticated(
            f"{path} is authenticated under key ID {key_id!r}, which the given keys do not hold "
            f"(key IDs given: {listed})",
            reason="EncryptionKeyMissing",
        )
    if not hmac.compare_digest(manifest_mac(key, path, document), mac):
        raise ManifestUnauthenticated(
            f"{path}: its MAC does not match under key {key_id!r}: the manifest was altered or copied here from "
            f"another name or another backup, or the key given under that ID is not the backup's"
        )


def document_json(format_name: str, record: Any, path: str = "", backup_key: bytes | None = None) -> bytes:
    """A record (a dataclass) as the JSON document this operator writes: its format and
    writer, then its fields in camelCase, unset (None) ones left out; with `backup_key`,
    the MAC of the document as stored at `path` (the record's keyId names the key)."""
    fields = {json_field_name(k): v for k, v in dataclasses.asdict(record).items() if v is not None}
    document = {"format": format_name, "writer": WRITER, **fields}
    if backup_key is not None:
        if not document.get("keyId"):
            raise ValueError("a manifest authenticated under a key names its key ID")
        document[MAC_FIELD] = manifest_mac(backup_key, path, document)
    return json.dumps(document, indent=2, sort_keys=True).encode()


def document_fields(cls: Any, data: bytes, format_name: str, what: str) -> dict[str, Any]:
    """The fields of dataclass `cls` read from a document `document_json` wrote in
    `format_name`; a field with a default may be absent. Raises ValueError otherwise."""
    try:
        body = json.loads(data)
    except (TypeError, ValueError) as e:
        raise ValueError(f"not JSON: {e}") from None
    if not isinstance(body, dict) or body.get("format") != format_name or body.get("writer") != WRITER:
        raise ValueError(f"not an etcd-operator {what}")
    fields: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        name = json_field_name(field.name)
        if name in body:
            fields[field.name] = body[name]
        elif field.default is dataclasses.MISSING:
            raise ValueError(f"{what} lacks {name!r}")
    return fields


def json_field_name(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def manifest_key(snapshot_key: str) -> str:
    return snapshot_key.removesuffix(SNAPSHOT_SUFFIX) + MANIFEST_SUFFIX


def backup_prefix(prefix: str, namespace: str, backup: str) -> str:
    """Everything one EtcdBackup writes lives under this prefix, and nothing else it touches."""
    base = prefix.strip("/")
    return f"{base}/{namespace}/{backup}/" if base else f"{namespace}/{backup}/"


def snapshot_key(prefix: str, namespace: str, backup: str, slot: str) -> str:
    return f"{backup_prefix(prefix, namespace, backup)}{slot}{SNAPSHOT_SUFFIX}"
