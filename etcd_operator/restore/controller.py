"""Drives one EtcdRestore through Pending → Verifying → Restoring → Completed | Failed.

Nothing is touched until the snapshot is verified. Each pass takes one idempotent step
decided from status and from the objects it finds, so a restarted operator resumes where
it stopped; the seed is restored at most once (its PVC is marked when the restore pod
succeeded, and the restore pod is only created for an unmarked PVC)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Mapping

import kopf

from etcd_operator import API_GROUP, conditions as c, faults
from etcd_operator.timefmt import now_text
from etcd_operator.backup.verify import VerificationFailed, verify_snapshot
from etcd_operator.cluster import builders as cluster_builders
from etcd_operator.cluster import naming
from etcd_operator.cluster.spec import ClusterSpec, parse_version
from etcd_operator.kube import client as kube
from etcd_operator.restore import builders, source as sources
from etcd_operator.storage.credentials import s3_location
from etcd_operator.storage.s3 import S3Storage, StorageError

logger = logging.getLogger(__name__)

ANNOTATION_RESTORING = naming.ANNOTATION_RESTORE_IN_PROGRESS
ANNOTATION_MIN_ORDINAL = naming.ANNOTATION_MIN_ORDINAL
ANNOTATION_RESTORED_BY = f"{API_GROUP}/restored-by"
LABEL_PRESERVED_BY = f"{API_GROUP}/preserved-by-restore"
LABEL_PRESERVED_FROM = f"{API_GROUP}/preserved-from-cluster"
SEED_ATTEMPTS = 3

EventPoster = Callable[[str, str, str], None]


class RestoreController:
    def __init__(self, kube_client: kube.KubeClient, operator_image: str, post_event: EventPoster):
        self.kube = kube_client
        self.operator_image = operator_image
        self.post_event = post_event

    async def _patch(self, body: Mapping[str, Any], status: dict) -> None:
        meta = body["metadata"]
        await self.kube.merge_patch(kube.ETCDRESTORES, meta["namespace"], meta["name"], {"status": status},
                                    subresource="status")

    def _conditions(self, body, progressing: bool, reason: str, message: str, failed: bool = False,
                    completed: bool = False) -> list[dict]:
        return c.merge((body.get("status") or {}).get("conditions"), [
            c.Condition("Progressing", progressing, reason, message if progressing else ""),
            c.Condition("Failed", failed, reason if failed else "NoFailure", message if failed else ""),
            c.Condition("Completed", completed, reason if completed else "NotYet", message if completed else ""),
        ], now_text(), body["metadata"].get("generation"))

    async def _fail(self, body, reason: str, message: str) -> None:
        await self._patch(body, {"phase": "Failed", "completionTime": now_text(), "progress": message,
                                 "conditions": self._conditions(body, False, reason, message, failed=True)})
        self.post_event("Warning", reason, message)

    async def reconcile(self, body: Mapping[str, Any]) -> float | None:
        phase = (body.get("status") or {}).get("phase")
        if phase in ("Completed", "Failed"):
            return None
        if phase is None or phase == "Pending":
            await self._patch(body, {"phase": "Verifying", "startTime": now_text(),
                                     "observedGeneration": body["metadata"].get("generation"),
                                     "conditions": self._conditions(body, True, "Verifying", "verifying the snapshot")})
            return 0.1
        if phase == "Verifying":
            try:
                await self._verify(body)
            except VerificationFailed as e:
                await self._fail(body, e.reason, e.message)
                return None
            except StorageError as e:
                reason = "CredentialsNotFound" if e.code.startswith("Secret") else "StorageError"
                if not e.permanent:
                    logger.warning("restore verification hit a transient error: %s", e)
                    return 10.0
                await self._fail(body, reason, f"S3: {e}")
                return None
            return 0.1
        try:
            return await self._restore_step(body)
        except VerificationFailed as e:
            await self._fail(body, e.reason, e.message)
            return None

    # --- Verifying: reads only ---------------------------------------------------------

    async def _verify(self, body: Mapping[str, Any]) -> None:
        meta, spec = body["metadata"], body["spec"]
        namespace = meta["namespace"]
        s3 = await sources.s3_block(self.kube, namespace, spec["source"])
        storage = await asyncio.to_thread(S3Storage, await s3_location(self.kube, namespace, s3))
        try:
            await storage.check_bucket()
            snapshot = await sources.resolve(storage, namespace, spec["source"], s3)
            await self._patch(body, {"progress": f"verifying {snapshot.key}", "sourceKey": snapshot.key,
                                     "sourceBucket": s3["bucket"]})
            verified = await verify_snapshot(storage, snapshot.key, snapshot.manifest)
        finally:
            await asyncio.to_thread(storage.close)

        target_name, target_version, in_place = await self._check_target(body)
        manifest = snapshot.manifest
        if manifest is not None and parse_version(target_version)[:2] < parse_version(manifest.etcd_version)[:2]:
            raise VerificationFailed(
                "VersionTooOld", f"the snapshot was taken with etcd {manifest.etcd_version}; etcd {target_version} "
                                 f"cannot restore it. Use {'.'.join(manifest.etcd_version.split('.')[:2])}.x or newer")
        status = {
            "phase": "Restoring",
            "sourceKey": verified.key,
            "sourceBucket": s3["bucket"],
            "sha256": verified.sha256,
            "targetCluster": target_name,
            "progress": f"verified {verified.size} bytes; restoring",
            "conditions": self._conditions(body, True, "Restoring", f"snapshot verified ({verified.size} bytes)"),
        }
        if manifest is not None:
            status.update(restoredRevision=manifest.revision, snapshotEtcdVersion=manifest.etcd_version)
        await self._patch(body, status)
        self.post_event("Normal", "SnapshotVerified",
                        f"{verified.key}: sha256 {verified.sha256[:12]}… and etcd's checksum match; restoring into "
                        f"{'the existing' if in_place else 'new'} EtcdCluster {target_name}")

    async def _check_target(self, body: Mapping[str, Any]) -> tuple[str, str, bool]:
        namespace = body["metadata"]["namespace"]
        target = body["spec"]["target"]
        if "inPlace" in target:
            name = target["inPlace"]["clusterName"]
            cluster = await self.kube.get(kube.ETCDCLUSTERS, namespace, name)
            if cluster is None:
                raise VerificationFailed("ClusterNotFound", f"EtcdCluster {namespace}/{name} does not exist")
            return name, ClusterSpec.from_dict(cluster.get("spec") or {}).version, True
        name = target["newCluster"]["name"]
        existing = await self.kube.get(kube.ETCDCLUSTERS, namespace, name)
        if existing is not None and (existing["metadata"].get("annotations") or {}).get(
                ANNOTATION_RESTORING) != body["metadata"]["name"]:
            raise VerificationFailed("TargetExists", f"EtcdCluster {namespace}/{name} already exists; a restore into "
                                                     f"a new cluster never touches an existing one")
        manifest = self._new_cluster_manifest(body)
        try:
            await self.kube.create(kube.ETCDCLUSTERS, namespace, manifest, dry_run=True)
        except kube.ApiError as e:
            raise VerificationFailed("InvalidClusterSpec", f"spec.target.newCluster.spec: {e.message}") from None
        except kube.Conflict:
            pass
        return name, ClusterSpec.from_dict(manifest["spec"]).version, False

    def _new_cluster_manifest(self, body: Mapping[str, Any]) -> dict:
        new = body["spec"]["target"]["newCluster"]
        return {
            "apiVersion": f"{kube.ETCDCLUSTERS.group}/{kube.ETCDCLUSTERS.version}",
            "kind": "EtcdCluster",
            "metadata": {"name": new["name"], "namespace": body["metadata"]["namespace"],
                         "annotations": {ANNOTATION_RESTORING: body["metadata"]["name"]}},
            "spec": dict(new.get("spec") or {}),
        }

    # --- Restoring: one idempotent step per pass ----------------------------------------

    async def _restore_step(self, body: Mapping[str, Any]) -> float | None:
        meta, status = body["metadata"], body.get("status") or {}
        namespace, restore = meta["namespace"], meta["name"]
        in_place = "inPlace" in body["spec"]["target"]
        cluster_name = status["targetCluster"]
        cluster = await self.kube.get(kube.ETCDCLUSTERS, namespace, cluster_name)

        if cluster is None:
            if in_place:
                raise VerificationFailed("ClusterNotFound", f"EtcdCluster {namespace}/{cluster_name} disappeared")
            await self.kube.create(kube.ETCDCLUSTERS, namespace, self._new_cluster_manifest(body))
            return 0.5
        annotations = cluster["metadata"].get("annotations") or {}
        seed = status.get("seedMember")

        if in_place and seed is None:
            return await self._stop_and_preserve(body, cluster)
        if seed is None:
            seed = naming.member_name(cluster_name, 0)
            await self._patch(body, {"seedMember": seed})
            return 0.1

        pvc_name = naming.pvc_name(seed)
        pvc = await self.kube.get(kube.PVCS, namespace, pvc_name)
        spec = ClusterSpec.from_dict(cluster.get("spec") or {})
        if pvc is None:
            manifest = cluster_builders.member_pvc(spec, cluster_name, namespace, seed, None)
            kopf.adopt(manifest, owner=cluster)
            await self.kube.create(kube.PVCS, namespace, manifest)
            return 0.5
        restored = (pvc["metadata"].get("annotations") or {}).get(ANNOTATION_RESTORED_BY) == meta["uid"]
        if not restored:
            return await self._seed(body, cluster, spec, seed, pvc)

        if await self.kube.delete(kube.PODS, namespace, builders.restore_pod_name(restore)):
            return 0.5
        if ANNOTATION_RESTORING in annotations:
            await self.kube.merge_patch(kube.ETCDCLUSTERS, namespace, cluster_name,
                                        {"metadata": {"annotations": {ANNOTATION_RESTORING: None}}})
            self.post_event("Normal", "ClusterReleased",
                            f"{seed} holds the restored data; the other members join one at a time")
            return 1.0
        cluster_status = cluster.get("status") or {}
        ready, size = cluster_status.get("readyMembers", 0), spec.size
        available = (c.find(cluster_status.get("conditions"), "Available") or {}).get("status") == "True"
        if available and ready >= size and cluster_status.get("phase") == "Running":
            await self._patch(body, {
                "phase": "Completed", "completionTime": now_text(), "clusterID": cluster_status.get("clusterID"),
                "progress": f"{ready}/{size} members ready",
                "conditions": self._conditions(body, False, "Restored", "the restored cluster is available",
                                               completed=True)})
            self.post_event("Normal", "RestoreCompleted",
                            f"EtcdCluster {cluster_name} is available with {ready} members from {status.get('sourceKey')}")
            return None
        progress = f"{ready}/{size} members ready"
        if status.get("progress") != progress:
            await self._patch(body, {"progress": progress})
        return 3.0

    async def _stop_and_preserve(self, body: Mapping[str, Any], cluster: Mapping[str, Any]) -> float:
        """In place: stop the cluster, keep every old PVC aside, then choose a fresh seed."""
        meta, status = body["metadata"], body.get("status") or {}
        namespace, cluster_name = meta["namespace"], cluster["metadata"]["name"]
        annotations = cluster["metadata"].get("annotations") or {}
        if annotations.get(ANNOTATION_RESTORING) != meta["name"]:
            await self.kube.merge_patch(kube.ETCDCLUSTERS, namespace, cluster_name,
                                        {"metadata": {"annotations": {ANNOTATION_RESTORING: meta["name"]}}})
            self.post_event("Normal", "ClusterStopping", f"Stopping EtcdCluster {cluster_name} for an in-place restore")
            return 0.5
        selector = naming.label_selector(naming.selector_labels(cluster_name))
        pods = await self.kube.list(kube.PODS, namespace, selector)
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        for pod in live:
            await self.kube.delete(kube.PODS, namespace, pod["metadata"]["name"], uid=pod["metadata"]["uid"])
        if pods:
            await self._patch(body, {"progress": f"stopping {len(pods)} members"})
            return 1.0
        pvcs = await self.kube.list(kube.PVCS, namespace, selector)
        preserved = sorted(set(status.get("preservedData") or []) | {p["metadata"]["name"] for p in pvcs})
        if preserved != sorted(status.get("preservedData") or []):
            await self._patch(body, {"preservedData": preserved})  # recorded before anything moves
            return 0.1
        for pvc in pvcs:
            labels = {k: None for k in naming.member_labels(cluster_name, "")}
            labels.update({LABEL_PRESERVED_BY: meta["name"], LABEL_PRESERVED_FROM: cluster_name})
            owners = [o for o in pvc["metadata"].get("ownerReferences") or []
                      if o.get("uid") != cluster["metadata"]["uid"]]
            await self.kube.merge_patch(kube.PVCS, namespace, pvc["metadata"]["name"],
                                        {"metadata": {"labels": labels, "ownerReferences": owners or None}})
        if pvcs:
            self.post_event("Normal", "OldDataPreserved",
                            f"Kept the old data aside in PVCs {', '.join(preserved)} until the restore succeeds")
            return 0.5
        ordinals = [naming.member_ordinal(cluster_name, n.removeprefix("data-")) for n in preserved]
        seed_ordinal = max([o for o in ordinals if o is not None], default=-1) + 1
        await self.kube.merge_patch(kube.ETCDCLUSTERS, namespace, cluster_name,
                                    {"metadata": {"annotations": {ANNOTATION_MIN_ORDINAL: str(seed_ordinal)}}})
        await self._patch(body, {"seedMember": naming.member_name(cluster_name, seed_ordinal)})
        return 0.1

    async def _seed(self, body, cluster, spec: ClusterSpec, seed: str, pvc: Mapping[str, Any]) -> float | None:
        meta, status = body["metadata"], body.get("status") or {}
        namespace = meta["namespace"]
        pod_name = builders.restore_pod_name(meta["name"])
        pod = await self.kube.get(kube.PODS, namespace, pod_name)
        if pod is None:
            s3 = await sources.s3_block(self.kube, namespace, body["spec"]["source"])
            manifest = builders.restore_pod(
                meta["name"], namespace, cluster["metadata"]["name"], seed, cluster["metadata"]["uid"],
                spec.image, self.operator_image, s3, status["sourceKey"], status["sha256"])
            kopf.adopt(manifest, owner=dict(body))
            await self.kube.create(kube.PODS, namespace, manifest)
            self.post_event("Normal", "SeedingMember", f"Restoring {seed}'s data directory from {status['sourceKey']}")
            faults.hit(faults.DURING_RESTORE)
            return 1.0
        phase = (pod.get("status") or {}).get("phase")
        if phase == "Succeeded":
            await self.kube.merge_patch(kube.PVCS, namespace, pvc["metadata"]["name"],
                                        {"metadata": {"annotations": {ANNOTATION_RESTORED_BY: meta["uid"]}}})
            self.post_event("Normal", "SnapshotRestored", f"{seed}'s data directory was restored with etcdutl")
            return 0.1
        if phase == "Failed":
            attempts = int(status.get("seedAttempts", 0)) + 1
            if attempts >= SEED_ATTEMPTS:
                await self._fail(body, "SeedFailed", f"the restore pod {pod_name} failed {attempts} times; see its logs")
                return None
            await self._patch(body, {"seedAttempts": attempts})
            await self.kube.delete(kube.PODS, namespace, pod_name, uid=pod["metadata"]["uid"])
            return 2.0
        if status.get("progress") != f"seeding {seed}":
            await self._patch(body, {"progress": f"seeding {seed}"})
        return 2.0

