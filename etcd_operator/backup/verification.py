"""Verifies one backup by restoring it: starts the scratch pod (verification_pod), waits for
its etcd, and compares revision, key count and HashKV at the snapshot's revision with what
the source answered right after the snapshot (in the manifest). The verdict is written into
the manifest. Never deletes a backup; deletes only its own scratch pod."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any, Mapping

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

POD_START_TIMEOUT = 300.0
POLL_SECONDS = 1.0


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

    async def verify(self, key: str) -> tuple[Verdict, str]:
        """(verdict, time of the verdict). The manifest is updated with it."""
        namespace = self.identity.namespace
        location = await s3_location(self.kube, namespace, self.spec.s3)
        storage = await asyncio.to_thread(S3Storage, location, 2)
        try:
            try:
                manifest = Manifest.from_json(await storage.get(manifest_key(key)))
            except StorageError as e:
                raise VerificationError("ManifestUnreadable", f"{manifest_key(key)}: {e}") from None
            if not manifest.belongs_to(self.identity):
                raise VerificationError("ForeignManifest", f"{manifest_key(key)} was not written by this EtcdBackup")
            verdict = await self._restore_and_compare(manifest)
            at = now_text()
            if verdict.verified is not None:
                updated = dataclasses.replace(manifest, verified=verdict.verified, verified_at=at, verification={
                    "reason": verdict.reason, "message": verdict.message, **verdict.observed})
                await storage.put(updated.key, updated.to_json(), "application/json")
            return verdict, at
        finally:
            await asyncio.to_thread(storage.close)

    async def _image(self, manifest: Manifest) -> str:
        cluster = await self.kube.get(kube.ETCDCLUSTERS, self.identity.namespace, self.spec.cluster)
        if cluster is None:
            raise VerificationError("ClusterNotFound", f"EtcdCluster {self.spec.cluster} is gone; its image "
                                    "repository is unknown")
        return f"{ClusterSpec.from_dict(cluster.get('spec') or {}).repository}:v{manifest.etcd_version}"

    async def _restore_and_compare(self, manifest: Manifest) -> Verdict:
        namespace, name = self.identity.namespace, builder.pod_name(self.identity.backup)
        body = builder.verification_pod(self.identity.backup, namespace, self.identity.uid,
                                        await self._image(manifest), self.operator_image, self.spec.s3,
                                        manifest.snapshot_key, manifest.sha256)
        existing = await self.kube.get(kube.PODS, namespace, name)
        if existing is not None:  # left by an interrupted verification: never reused
            await self.kube.delete(kube.PODS, namespace, name, uid=existing["metadata"]["uid"], grace_period=0)
            await self._wait_gone(namespace, name)
        pod = await self.kube.create(kube.PODS, namespace, body)
        try:
            ip = await self._wait_serving(namespace, name)
            async with EtcdMemberClient(f"{ip}:{naming.CLIENT_PORT}", timeout=30) as client:
                revision = (await client.status()).revision
                hash_kv, compact_revision = await client.hash_kv(manifest.revision)
                key_count = await client.count_keys(manifest.revision)
            return compare(manifest, revision, key_count, hash_kv, compact_revision)
        except _InitFailed as failure:
            return init_failure_verdict(failure)
        except EtcdError as e:
            raise VerificationError("ScratchMemberUnavailable", f"the scratch member did not answer: {e}") from None
        finally:
            await self.kube.delete(kube.PODS, namespace, name, uid=pod["metadata"]["uid"], grace_period=0)

    async def _wait_gone(self, namespace: str, name: str) -> None:
        deadline = time.monotonic() + POD_START_TIMEOUT
        while await self.kube.get(kube.PODS, namespace, name) is not None:
            if time.monotonic() > deadline:
                raise VerificationError("ScratchPodStuck", f"pod {name} from an earlier verification is not gone")
            await asyncio.sleep(POLL_SECONDS)

    async def _wait_serving(self, namespace: str, name: str) -> str:
        """The pod IP once its etcd is ready. A failed init container is a verdict about
        the snapshot (it could not be fetched with its sha256, or not restored)."""
        deadline = time.monotonic() + POD_START_TIMEOUT
        while time.monotonic() < deadline:
            pod = await self.kube.get(kube.PODS, namespace, name) or {}
            status = pod.get("status") or {}
            for container in (status.get("initContainerStatuses") or []):
                done = (container.get("state") or {}).get("terminated") or {}
                if done and done.get("exitCode") not in (None, 0):
                    raise _InitFailed(container["name"], done)
            if status.get("phase") == "Failed":
                raise VerificationError("ScratchPodFailed", f"pod {name} failed: {status.get('message', '')}")
            ready = all(c.get("ready") for c in status.get("containerStatuses") or [{}])
            if status.get("phase") == "Running" and ready and status.get("podIP"):
                return status["podIP"]
            await asyncio.sleep(POLL_SECONDS)
        raise VerificationError("ScratchPodTimeout", f"pod {name} did not serve within {POD_START_TIMEOUT:.0f}s")


class _InitFailed(Exception):
    def __init__(self, container: str, terminated: Mapping[str, Any]):
        super().__init__(container)
        self.container = container
        self.terminated = terminated


SHA256_REFUSED = 3  # etcd_operator.seed: the object's sha256 differs from the manifest's


def init_failure_verdict(failure: _InitFailed) -> Verdict:
    """etcdutl refusing the snapshot, or the object differing from its manifest, is a
    verdict; any other fetch failure (the store unreachable) is not."""
    code = failure.terminated.get("exitCode")
    detail = (failure.terminated.get("message") or "").strip()[-300:]
    text = f"{failure.container} exited with {code}" + (f": {detail}" if detail else "")
    if failure.container == "restore":
        return Verdict(False, "SnapshotNotRestorable", text)
    if code == SHA256_REFUSED:
        return Verdict(False, "ChecksumMismatch", text)
    raise VerificationError("SnapshotNotFetched", text)
