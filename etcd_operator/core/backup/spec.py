"""What a backup run reads from an EtcdBackup's spec: the cluster, the store, the upload's
part size and concurrency, retention, and how snapshots are stored (compression,
encryption). Pure."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from etcd_operator.core.durations import parse_duration


@dataclasses.dataclass(frozen=True)
class BackupSpec:
    cluster: str
    s3: Mapping[str, Any]
    prefix: str
    part_size: int
    concurrency: int
    max_backups: int | None
    max_age: float | None
    compression: str = "zstd"  # spec.compression: zstd or none
    encryption_secret: str | None = None  # spec.encryption.secretRef.name
    encryption_key_id: str | None = None  # spec.encryption.keyID: the key new backups are encrypted with

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> BackupSpec:
        s3 = spec["storage"]["s3"]
        kept = spec.get("retention") or {}
        encryption = spec.get("encryption") or {}
        return cls(
            cluster=spec["clusterRef"]["name"],
            s3=s3,
            prefix=s3.get("prefix", ""),
            part_size=int(s3.get("partSizeBytes", 8 << 20)),
            concurrency=int(s3.get("uploadConcurrency", 3)),
            max_backups=kept.get("maxBackups"),
            max_age=parse_duration(kept["maxAge"]) if kept.get("maxAge") else None,
            compression=spec.get("compression", "zstd"),
            encryption_secret=(encryption.get("secretRef") or {}).get("name"),
            encryption_key_id=encryption.get("keyID"),
        )

    @property
    def has_retention(self) -> bool:
        return self.max_backups is not None or self.max_age is not None
