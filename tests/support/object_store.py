"""An in-memory stand-in for the few S3Storage calls a continuous backup's segment store,
retention and the replay make, answering a create-only PUT as S3 and MinIO do
(If-None-Match: *). A bucket without versions: one plain DELETE removes a key."""

from __future__ import annotations

from etcd_operator.clients.storage.s3 import ObjectExists, StorageError
from etcd_operator.core.backup.object_lock import StoredObject, StoredVersion


class MemoryStore:
    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.deleted: list[str] = []

    async def put(self, key: str, data: bytes, content_type: str | None = None, create_only: bool = False) -> None:
        if create_only and key in self.objects:
            raise ObjectExists("PreconditionFailed", "PreconditionFailed", True)
        self.objects[key] = bytes(data)

    async def get(self, key: str) -> bytes:
        if key not in self.objects:
            raise StorageError(f"NoSuchKey: {key}", "NoSuchKey", True)
        return self.objects[key]

    async def list_keys(self, prefix: str) -> list[str]:
        return sorted(k for k in self.objects if k.startswith(prefix))

    async def exists(self, key: str) -> bool:
        return key in self.objects

    async def stored(self, key: str) -> StoredObject:
        return StoredObject(key, (StoredVersion(None),) if key in self.objects else ())

    async def delete(self, key: str, version_id: str | None = None) -> None:
        self.objects.pop(key, None)
        self.deleted.append(key)
