"""The I/O of verifying one backup, one call per pass (the planner decides which): create
the scratch pod (backup.scratch_pod) for a key, with what the source answered right after the
snapshot (in the manifest) for the pod to compare its restored copy against; mark the
manifest with the verdict the pod gave; delete the scratch pod by its uid. Never connects to
the scratch member, never deletes a backup or a manifest; deletes only its own scratch pod."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

from etcd_operator.clients.kube import client as kube
from etcd_operator.clients.storage.credentials import s3_location
from etcd_operator.clients.storage.keyring import read_keyring
from etcd_operator.clients.storage.s3 import S3Storage, StorageError
from etcd_operator.core.backup import scratch_pod as builder
from etcd_operator.core.backup.keyring import KeyringError
from etcd_operator.core.backup.manifest import Identity, Manifest, ManifestUnauthenticated, manifest_key
from etcd_operator.core.backup.scratch_verdict import Expected, Verdict
from etcd_operator.core.backup.spec import BackupSpec
from etcd_operator.core.cluster.builders import image_pull_secrets
from etcd_operator.core.cluster.spec import ClusterSpec
from etcd_operator.core.timefmt import now_text

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
        image, pull_secrets = await self._images(manifest)
        body = builder.verification_pod(
            self.identity.backup,
            self.identity.namespace,
            self.identity.uid,
            image,
            self.operator_image,
            self.spec.s3,
            manifest.snapshot_key,
            manifest.sha256,
            Expected.of(manifest),
            pull_secrets=pull_secrets,
            keys_secret=self.spec.encryption_secret if manifest.encryption else None,
        )
        created = await self.kube.create(kube.PODS, self.identity.namespace, body)
        if created is None:  # the client answers 404 with None: the namespace is gone
            raise kube.ApiError(404, "NotFound", f"pod {self.pod_name}: namespace {self.identity.namespace} is gone")
        return created

    async def record_verdict(self, key: str, verdict: Verdict) -> str:
        """Marks the manifest with the verdict the scratch pod gave (in its own status);
        the verdict's time."""
        async with self._storage() as storage:
            manifest = await self._manifest(storage, key)
            if verdict.verified and not verdict.observed:
                # "Verified" is the pod's finding that each answer equals the manifest's.
                verdict = dataclasses.replace(
                    verdict,
                    observed={
                        "revision": manifest.revision,
                        "keyCount": manifest.key_count,
                        "hashKv": manifest.hash_kv,
                        "compactRevision": manifest.compact_revision,
                    },
                )
            return await self._mark(storage, manifest, verdict)

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

    async def _keys(self) -> dict[str, bytes]:
        """The backup's keys (spec.encryption), {} without."""
        if not self.spec.encryption_secret:
            return {}
        try:
            return await read_keyring(self.kube, self.identity.namespace, self.spec.encryption_secret)
        except KeyringError as e:
            raise VerificationError(e.reason, e.message) from None

    async def _manifest(self, storage: S3Storage, key: str) -> Manifest:
        """The manifest of `key`, authenticated under the backup's keys when it has any."""
        path = manifest_key(key)
        try:
            manifest = Manifest.read(await storage.get(path), path, await self._keys())
        except StorageError as e:
            raise VerificationError("ManifestUnreadable", f"{path}: {e}") from None
        except ManifestUnauthenticated as e:
            raise VerificationError(e.reason, e.message) from None
        if not manifest.belongs_to(self.identity):
            raise VerificationError("ForeignManifest", f"{manifest_key(key)} was not written by this EtcdBackup")
        return manifest

    async def _mark(self, storage: S3Storage, manifest: Manifest, verdict: Verdict) -> str:
        at = now_text()
        if verdict.verified is not None:
            updated = dataclasses.replace(
                manifest,
                verified=verdict.verified,
                verified_at=at,
                verification={"reason": verdict.reason, "message": verdict.message, **verdict.observed},
            )
            key = (await self._keys()).get(manifest.key_id or "") if manifest.encryption else None
            await storage.put(updated.key, updated.to_json(key), "application/json")
        return at

    async def _images(self, manifest: Manifest) -> tuple[str, list[dict[str, str]]]:
        """The etcd image of the snapshot's version in the cluster's repository, and the
        cluster's pull secrets."""
        cluster = await self.kube.get(kube.ETCDCLUSTERS, self.identity.namespace, self.spec.cluster)
        if cluster is None:
            raise VerificationError(
                "ClusterNotFound", f"EtcdCluster {self.spec.cluster} is gone; its image repository is unknown"
            )
        spec = ClusterSpec.from_dict(cluster.get("spec") or {})
        return f"{spec.repository}:v{manifest.etcd_version}", image_pull_secrets(spec)
