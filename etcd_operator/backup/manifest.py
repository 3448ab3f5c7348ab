"""The small JSON document written beside every snapshot. Retention and restore trust
only what manifests say, never object names."""

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

    @property
    def key(self) -> str:
        return manifest_key(self.snapshot_key)

    def to_json(self) -> bytes:
        body = {"format": FORMAT, "writer": WRITER, **{_camel(k): v for k, v in dataclasses.asdict(self).items()}}
        return json.dumps(body, indent=2, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> "Manifest":
        """Raises ValueError for anything this operator did not write."""
        try:
            body = json.loads(data)
        except (TypeError, ValueError) as e:
            raise ValueError(f"not JSON: {e}") from None
        if not isinstance(body, dict) or body.get("format") != FORMAT or body.get("writer") != WRITER:
            raise ValueError("not an etcd-operator snapshot manifest")
        try:
            fields = {f.name: body[_camel(f.name)] for f in dataclasses.fields(cls)}
        except KeyError as e:
            raise ValueError(f"manifest lacks {e}") from None
        fields["revision"], fields["size"] = int(fields["revision"]), int(fields["size"])
        return cls(**fields)

    def status_record(self) -> dict[str, Any]:
        return {"key": self.snapshot_key, "manifestKey": self.key, "revision": self.revision, "size": self.size,
                "sha256": self.sha256, "etcdVersion": self.etcd_version, "clusterID": self.cluster_id,
                "member": self.member, "completionTime": self.created_at}


def _camel(name: str) -> str:
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
