"""The I/O of verifying one backup, one call per pass (the planner decides which): create
the scratch pod (verification_pod) for a key, compare the serving scratch member's revision,
key count and HashKV at the snapshot's revision with what the source answered right after
the snapshot (in the manifest), mark the manifest with the verdict, and delete the scratch
pod by its uid. Never deletes a backup or a manifest; deletes only its own scratch pod."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from typing import Any, AsyncIterator, Mapping

from etcd_operator.backup import verification_pod as builder
from etcd_operator.backup.manifest import Identity, Manifest, manifest_key
from etcd_operator.backup.runner import BackupSpec
from etcd_operator.backup.verdict import Verdict, compare
from etcd_operator.cluster import naming
from etcd_operator.cluster.spec import ClusterSpec
from etcd_operator.etcd.client import EtcdError, EtcdMemberClient
from etcd_operator.kube import client as kube
from etcd_operator.storage.credentials import s3_location
from etcd_operator.storage.s3 import S3Storage, StorageError
from etcd_operator.timefmt import now_text

logger = logging.getLogger(__name__)


class VerificationError(Exception):
    """The verification could not be carried out (no verdict about the backup)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


class BackupVerifier:
    def __init__(self, kube_client: kube.KubeClient, operator_image: str, body: Mapping[str, Any]):
        self.kube = kube_client
        self.operator_image = operator_image
        meta = body["metadata"]
        self.identity = Identity(meta["namespace"], meta["name"], meta["uid"])
        self.spec = BackupSpec.from_dict(body["spec"])

    @property
    def pod_name(self) -> str:
        return builder.pod_name(self.identity.backup)

    async def create_pod(self, key: str) -> dict:
        """Creates the scratch pod for `key`; raises kube.Conflict when a pod of that name exists."""
        async with self._storage() as storage:
            manifest = await self._manifest(storage, key)
        body = builder.verification_pod(self.identity.backup, self.identity.namespace, self.identity.uid,
                                        await self._image(manifest), self.operator_image, self.spec.s3,
                                        manifest.snapshot_key, manifest.sha256)
        return await self.kube.create(kube.PODS, self.identity.namespace, body)

    async def compare(self, key: str, pod_ip: str) -> tuple[Verdict, str]:
        """(verdict, its time): the scratch member at `pod_ip` against the manifest, which is
        marked with a verdict when there is one."""
        async with self._storage() as storage:
            manifest = await self._manifest(storage, key)
            try:
                async with EtcdMemberClient(f"{pod_ip}:{naming.CLIENT_PORT}", timeout=30) as client:
                    revision = (await client.status()).revision
                    hash_kv, compact_revision = await client.hash_kv(manifest.revision)
                    key_count = await client.count_keys(manifest.revision)
            except EtcdError as e:
                raise VerificationError("ScratchMemberUnavailable", f"the scratch member did not answer: {e}") from None
            verdict = compare(manifest, revision, key_count, hash_kv, compact_revision)
            return verdict, await self._mark(storage, manifest, verdict)

    async def record_verdict(self, key: str, verdict: Verdict) -> str:
        """Marks the manifest with a verdict the scratch pod gave without serving (its
        snapshot was refused); the verdict's time."""
        async with self._storage() as storage:
            return await self._mark(storage, await self._manifest(storage, key), verdict)

    async def delete_pod(self, name: str, uid: str) -> None:
        """Only that incarnation: a pod of the same name with another uid is left alone."""
        await self.kube.delete(kube.PODS, self.identity.namespace, name, uid=uid, grace_period=0)

    @contextlib.asynccontextmanager
    async def _storage(self) -> AsyncIterator[S3Storage]:
        location = await s3_location(self.kube, self.identity.namespace, self.spec.s3)
        storage = await asyncio.to_thread(S3Storage, location, 2)
        try:
            yield storage
        finally:
            await asyncio.to_thread(storage.close)

    async def _manifest(self, storage: S3Storage, key: str) -> Manifest:
        try:
            manifest = Manifest.from_json(await storage.get(manifest_key(key)))
        except StorageError as e:
            raise VerificationError("ManifestUnreadable", f"{manifest_key(key)}: {e}") from None
        if not manifest.belongs_to(self.identity):
            raise VerificationError("ForeignManifest", f"{manifest_key(key)} was not written by this EtcdBackup")
        return manifest

    async def _mark(self, storage: S3Storage, manifest: Manifest, verdict: Verdict) -> str:
        at = now_text()
        if verdict.verified is not None:
            updated = dataclasses.replace(manifest, verified=verdict.verified, verified_at=at, verification={
                "reason": verdict.reason, "message": verdict.message, **verdict.observed})
            await storage.put(updated.key, updated.to_json(), "application/json")
        return at

    async def _image(self, manifest: Manifest) -> str:
        cluster = await self.kube.get(kube.ETCDCLUSTERS, self.identity.namespace, self.spec.cluster)
        if cluster is None:
            raise VerificationError("ClusterNotFound", f"EtcdCluster {self.spec.cluster} is gone; its image "
                                    "repository is unknown")
        return f"{ClusterSpec.from_dict(cluster.get('spec') or {}).repository}:v{manifest.etcd_version}"
