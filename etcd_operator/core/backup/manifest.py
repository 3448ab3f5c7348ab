"""The small JSON document written beside every snapshot. Retention and restore trust
only what manifests say, never object names.

A manifest names the EtcdBackup that wrote it (namespace, name, UID) and the source
cluster's ID. Only manifests of this backup's own identity count for it (retention,
"this slot already ran"); anything else under its prefix is foreign and never touched.
Manifests written before identities existed have no UID: they stay readable (restore can
still pick them by name), but they match no identity, so retention never deletes them and
they never count as a finished slot of a current backup."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

FORMAT = "etcd-operator.snapshot/v1"
WRITER = "etcd-operator"
MANIFEST_SUFFIX = ".manifest.json"
SNAPSHOT_SUFFIX = ".db"


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

    def to_json(self) -> bytes:
        return document_json(FORMAT, self)

    @classmethod
    def from_json(cls, data: bytes) -> Manifest:
        """Raises ValueError for anything this operator did not write."""
        fields = document_fields(cls, data, FORMAT, "snapshot manifest")
        fields["revision"], fields["size"] = int(fields["revision"]), int(fields["size"])
        return cls(**fields)

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
        }


@dataclasses.dataclass(frozen=True)
class Identity:
    """The EtcdBackup a manifest must name to count as this backup's own."""

    namespace: str
    backup: str
    uid: str


def document_json(format_name: str, record: Any) -> bytes:
    """A record (a dataclass) as the JSON document this operator writes: its format and
    writer, then its fields in camelCase, unset (None) ones left out."""
    fields = {json_field_name(k): v for k, v in dataclasses.asdict(record).items() if v is not None}
    return json.dumps({"format": format_name, "writer": WRITER, **fields}, indent=2, sort_keys=True).encode()


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
