"""Carries out one planned restore step against Kubernetes and S3. Each step is
idempotent: re-running it after a crash at any point converges to the same state. The
executor decides nothing; an unknown step is an error."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

import kopf

from etcd_operator.clients.kube import client as kube
from etcd_operator.clients.storage.credentials import s3_location
from etcd_operator.clients.storage.keyring import read_keyring
from etcd_operator.clients.storage.s3 import S3Storage, StorageError
from etcd_operator.controllers import faults
from etcd_operator.controllers.backup.snapshot_integrity import VerificationFailed, verify_snapshot
from etcd_operator.controllers.restore import snapshot_lookup
from etcd_operator.controllers.restore.point_in_time import backup_folder
from etcd_operator.controllers.restore.replay_inputs import check_replay_inputs
from etcd_operator.core.backup import sealed
from etcd_operator.core.backup.bbolt import NotASnapshot, snapshot_revision, snapshot_storage_version
from etcd_operator.core.backup.keyring import KeyringError
from etcd_operator.core.backup.manifest import ignored_summary
from etcd_operator.core.backup.sealed_reader import open_plain
from etcd_operator.core.cluster import builders as cluster_builders
from etcd_operator.core.cluster import naming
from etcd_operator.core.cluster.spec import ClusterSpec
from etcd_operator.core.outcome import EventPoster, Outcome
from etcd_operator.core.restore import builders, fence, replay_pod
from etcd_operator.core.restore import steps as s
from etcd_operator.core.restore.observed import Observed
from etcd_operator.core.restore.planner import snapshot_etcd_version
from etcd_operator.core.restore.point_in_time import auth_condition
from etcd_operator.core.restore.spec import RestoreSpec, RestoreStatus

logger = logging.getLogger(__name__)

TRANSIENT_RETRY = 10.0  # seconds before S3 is tried again after a transient error
WHILE_NAMESPACE_TERMINATING = 10.0  # until the namespace's deletion takes the EtcdRestore too
Handler = Callable[[Any, Any, RestoreSpec, RestoreStatus, Observed], Awaitable[Outcome | None]]


class UnknownStep(Exception):
    """The planner asked for a step no handler carries out: a bug, never 'done'."""


class NothingCreated(Exception):
    """The live target is gone, replaced or being deleted (fence.creation_refusal): the pass
    decided on an older copy, and nothing is created for it."""


class RestoreExecutor:
    def __init__(
        self,
        kube_client: kube.KubeClient,
        operator_image: str,
        body: Mapping[str, Any],
        post_event: EventPoster,
        finalizer: str | None = None,
    ):
        self.kube = kube_client
        self.operator_image = operator_image
        self.body = body
        self.post_event = post_event
        self.finalizer = finalizer  # this instance's (its shard's): a new target cluster carries it
        self.namespace = body["metadata"]["namespace"]
        self.name = body["metadata"]["name"]

    async def run(self, step: s.Step, spec: RestoreSpec, status: RestoreStatus, observed: Observed) -> Outcome:
        handler = HANDLERS.get(type(step))
        if handler is None:
            raise UnknownStep(f"no handler for restore step {step.kind}")
        try:
            return await handler(self, step, spec, status, observed) or Outcome()
        except kube.Conflict as e:
            return Outcome(False, f"{step.kind}: an object changed meanwhile ({e}); looking again")
        except NothingCreated as e:
            return Outcome(False, f"{step.kind}: {e}; nothing is created for it")
        except kube.NamespaceTerminating:
            return Outcome(
                False,
                f"{step.kind}: namespace {self.namespace} is being deleted; nothing is created in it",
                retry_after=WHILE_NAMESPACE_TERMINATING,
            )

    # --- status only ------------------------------------------------------------------

    async def _nothing(self, step, spec, status, observed) -> None:
        return None

    async def _fail(self, step: s.Fail, spec, status, observed) -> None:
        self.post_event("Warning", step.code, step.reason)

    async def _skip(self, step: s.SkipAlreadyApplied, spec, status, observed) -> None:
        self.post_event("Normal", "AlreadyApplied", step.reason)

    async def _complete(self, step: s.Complete, spec, status, observed) -> None:
        self.post_event(
            "Normal",
            "RestoreCompleted",
            f"EtcdCluster {spec.target} is available with {step.ready} members from {status.source_key}",
        )

    async def _begin(self, step: s.BeginRestore, spec, status, observed) -> None:
        if step.bump_chosen:
            self.post_event("Normal", "RevisionBumpChosen", step.bump_chosen)
        self.post_event(
            "Normal",
            "SnapshotVerified",
            f"{status.source_key}: sha256 {(status.sha256 or '')[:12]}… and etcd's checksum match; {step.reason}",
        )

    async def _record_preserved(self, step, spec, status, observed) -> None:
        return None  # the status write of this pass records them

    async def _plan_replay(self, step: s.PlanReplay, spec, status, observed) -> None:
        """The status write of this pass records the plan and its AuthStateAtTarget; manifests
        ignored as unauthenticated, and a base whose auth state may not be the target's, are
        also said in Warning events."""
        if step.ignored:
            self.post_event("Warning", "ManifestUnauthenticated", step.ignored)
        auth = auth_condition(step.record) if step.record is not None else None
        if auth is not None and auth.status is not True:
            self.post_event("Warning", auth.reason, auth.message)

    async def _record_replay_result(self, step: s.RecordReplayResult, spec, status, observed) -> None:
        self.post_event("Normal", "Replayed", step.reason)  # the status write of this pass records it

    # --- reads only: verification -----------------------------------------------------

    async def _verify(self, step: s.VerifySnapshot, spec: RestoreSpec, status, observed) -> Outcome:
        source = spec.source
        if step.key:  # a point-in-time restore's snapshot: the replayed one, or its base
            source = {k: v for k, v in spec.source.items() if k != "pointInTime"}
            source["backupRef"] = {"name": spec.backup, "key": step.key}
        try:
            return await self._verified_facts(source)
        except VerificationFailed as e:
            return Outcome(failure=(e.reason, e.message))
        except KeyringError as e:
            return Outcome(failure=(e.reason, f"{e.message}; nothing was touched"))
        except StorageError as e:
            return self._storage_outcome("verification", e)

    def _storage_outcome(self, what: str, e: StorageError) -> Outcome:
        if not e.permanent:
            logger.warning("%s/%s: %s hit a transient error: %s", self.namespace, self.name, what, e)
            return Outcome(False, f"S3: {e}; retrying", retry_after=TRANSIENT_RETRY)
        reason = "CredentialsNotFound" if e.code.startswith("Secret") else "StorageError"
        return Outcome(failure=(reason, f"S3: {e}"))

    async def _verified_facts(self, source: Mapping[str, Any]) -> Outcome:
        s3 = await snapshot_lookup.s3_block(self.kube, self.namespace, source)
        keys_secret = await snapshot_lookup.keys_secret(self.kube, self.namespace, source)
        keys = await read_keyring(self.kube, self.namespace, keys_secret) if keys_secret else {}
        storage = await asyncio.to_thread(S3Storage, await s3_location(self.kube, self.namespace, s3))
        try:
            await storage.check_bucket()
            snapshot = await snapshot_lookup.resolve(storage, self.namespace, source, s3, keys)
            if snapshot.ignored:
                self.post_event("Warning", "ManifestUnauthenticated", ignored_summary(snapshot.ignored))

            def stored(offset: int, length: int):
                return storage.read_range(snapshot.key, offset, length)

            # The trial decryption: the header names the key ID, the index authenticates under
            # that key, before the whole object is read (and long before anything is touched).
            # With keys, a plain object is refused here (sealed.PlaintextRefused), then a
            # manifest that does not authenticate (after the trial: a wrong key fails it first).
            try:
                plain = await open_plain(stored, await storage.size(snapshot.key), keys)
            except sealed.SealedError as e:
                message = snapshot_lookup.unsealing_message(snapshot.key, e, keys_secret)
                raise VerificationFailed(e.reason, message) from None
            snapshot = await snapshot_lookup.authenticated(storage, snapshot, keys)
            verified = await verify_snapshot(storage, snapshot.key, snapshot.manifest, keys=keys)
            read = plain.read

            try:
                storage_version, readable = await snapshot_storage_version(read), True
                revision = await snapshot_revision(read)
            except NotASnapshot as e:
                logger.warning(
                    "%s/%s: cannot read %s's storage version: %s", self.namespace, self.name, snapshot.key, e
                )
                storage_version, readable, revision = None, False, None
        finally:
            await asyncio.to_thread(storage.close)
        manifest = snapshot.manifest
        facts: dict[str, Any] = {
            "sourceKey": verified.key,
            "sourceBucket": s3["bucket"],
            "sha256": verified.sha256,
            # what the restore pods' scratch space holds: the decoded snapshot
            "snapshotSize": verified.plain_size,
        }
        version = snapshot_etcd_version(manifest.etcd_version if manifest else None, storage_version, readable)
        if version:
            facts["snapshotEtcdVersion"] = version
        if manifest is not None:
            facts["restoredRevision"] = manifest.revision
        elif revision is not None:
            facts["restoredRevision"] = revision
        left_out = f"; {ignored_summary(snapshot.ignored)}" if snapshot.ignored else ""
        return Outcome(message=f"verified {verified.size} bytes{left_out}", status_fields=facts)

    # --- point in time: the replay pod ------------------------------------------------

    async def _start_replay_pod(
        self, step: s.StartReplayPod, spec: RestoreSpec, status: RestoreStatus, observed: Observed
    ) -> Outcome | None:
        record = status.point_in_time
        if record is None or spec.point is None:
            raise RuntimeError(f"a replay pod for {self.name} was planned without a recorded plan")
        try:
            inputs = await check_replay_inputs(self.kube, self.namespace, spec.source, record)
        except VerificationFailed as e:
            return Outcome(failure=(e.reason, e.message))
        except KeyringError as e:
            return Outcome(failure=(e.reason, f"{e.message}; nothing was touched"))
        except StorageError as e:
            return self._storage_outcome("checking the replay's keys", e)
        if inputs.ignored:
            self.post_event("Warning", "ManifestUnauthenticated", ignored_summary(inputs.ignored))
        target_spec = (
            observed.target_spec if spec.in_place else ClusterSpec.from_dict(spec.new_cluster_spec)
        )  # the replay runs the target's etcd: what the members will run
        manifest = replay_pod.replay_pod(
            self.name,
            self.namespace,
            target_spec.image,
            self.operator_image,
            inputs.s3,
            backup_folder(self.namespace, spec.backup or "", inputs.s3),
            record,
            spec.point.time,
            pull_secrets=cluster_builders.image_pull_secrets(target_spec),
            keys_secret=inputs.keys_secret,
            sealing=inputs.sealing,
        )
        kopf.adopt(manifest, owner=cast(kopf.Body, dict(self.body)))
        try:
            await self.kube.create(kube.PODS, self.namespace, manifest)
        except kube.Conflict:
            return None  # the next pass reads it, and fails the restore if it is not this restore's
        self.post_event("Normal", "ReplayStarted", step.reason)
        return None

    async def _remove_replay_pod(self, step: s.RemoveReplayPod, spec, status, observed) -> None:
        await self.kube.delete(kube.PODS, self.namespace, step.pod, uid=step.pod_uid, grace_period=0)

    async def _fail_replay(self, step: s.FailReplay, spec, status, observed) -> None:
        await self.kube.delete(kube.PODS, self.namespace, step.pod, uid=step.pod_uid, grace_period=0)
        self.post_event("Warning", step.code, step.reason)

    # --- the target -------------------------------------------------------------------

    async def _create_cluster(self, step: s.CreateTargetCluster, spec: RestoreSpec, status, observed) -> None:
        manifest = builders.new_cluster(
            self.name,
            self.namespace,
            spec.target,
            spec.new_cluster_spec,
            self.body["metadata"].get("labels"),
            restore_uid=observed.uid,
            finalizer=self.finalizer,
        )
        try:
            await self.kube.create(kube.ETCDCLUSTERS, self.namespace, manifest)
        except kube.Conflict:
            pass  # the next pass tells whether it is the one this restore created (held by it)

    async def _fence(self, observed: Observed) -> None:
        """Right before a create for the target: the live object, not the pass's copy, decides."""
        live = await self.kube.get(kube.ETCDCLUSTERS, self.namespace, observed.target.name)
        refusal = fence.creation_refusal(observed.target, live)
        if refusal:
            raise NothingCreated(refusal)

    async def _patch_cluster(self, observed: Observed, patch: dict) -> None:
        """Patches the target only if it is still the version observed this pass."""
        patch.setdefault("metadata", {})["resourceVersion"] = observed.target.resource_version
        await self.kube.merge_patch(kube.ETCDCLUSTERS, self.namespace, observed.target.name, patch)

    async def _hold(self, step: s.HoldCluster, spec, status, observed: Observed) -> None:
        await self._patch_cluster(
            observed, {"metadata": {"annotations": builders.hold_annotations(self.name, observed.uid)}}
        )
        self.post_event(
            "Normal",
            "ClusterHeld",
            f"Holding EtcdCluster {spec.target} for the restore; nothing is "
            f"stopped before its controller acknowledges the hold",
        )

    async def _clear_recovery(self, step: s.ClearQuorumRecovery, spec, status, observed: Observed) -> Outcome | None:
        if step.clear_approval:
            await self.kube.merge_patch(
                kube.ETCDCLUSTERS,
                self.namespace,
                spec.target,
                {"metadata": {"annotations": {naming.ANNOTATION_APPROVE_QUORUM_RECOVERY: None}}},
            )
            self.post_event("Normal", "QuorumRecoveryCleared", step.reason)
        if step.clear_operation:
            # status.operation is the cluster controller's: it drops it on its next pass.
            return Outcome(
                False,
                f"waiting for EtcdCluster {spec.target}'s controller to drop its recorded "
                f"quorum recovery (status.operation)",
            )
        return None

    async def _stop_members(self, step: s.StopMembers, spec, status, observed) -> None:
        for name, uid in step.pods:
            await self.kube.delete(kube.PODS, self.namespace, name, uid=uid)
        self.post_event("Normal", "MembersStopping", step.reason)

    async def _set_aside(self, step: s.SetAsideData, spec, status, observed: Observed) -> None:
        for name, uid in step.pvcs:
            pvc = await self.kube.get(kube.PVCS, self.namespace, name)
            if pvc is None or pvc["metadata"]["uid"] != uid:
                continue  # gone or replaced: the next pass looks again
            patch = builders.set_aside_patch(
                self.name, spec.target, pvc["metadata"].get("ownerReferences") or [], observed.target.uid
            )
            patch["metadata"]["resourceVersion"] = pvc["metadata"]["resourceVersion"]
            await self.kube.merge_patch(kube.PVCS, self.namespace, name, patch)
        self.post_event("Normal", "OldDataPreserved", step.reason)

    async def _choose_members(self, step: s.ChooseMembers, spec: RestoreSpec, status, observed: Observed) -> None:
        if spec.in_place:
            await self._patch_cluster(
                observed, {"metadata": {"annotations": {naming.ANNOTATION_MIN_ORDINAL: str(step.min_ordinal)}}}
            )

    async def _create_seed_volumes(self, step: s.CreateSeedVolumes, spec, status, observed: Observed) -> None:
        cluster, cluster_spec = observed.target, observed.target_spec
        for member in step.members:
            # No owner reference, like every member PVC: the garbage collector never takes data.
            manifest = builders.seed_pvc(cluster_spec, cluster.name, self.namespace, member, observed.uid)
            await self._fence(observed)
            try:
                await self.kube.create(kube.PVCS, self.namespace, manifest)
            except kube.Conflict:
                pass  # the next pass checks that it is this restore's own

    async def _start_seed_pods(
        self, step: s.StartSeedPods, spec: RestoreSpec, status: RestoreStatus, observed: Observed
    ) -> Outcome | None:
        try:
            s3 = await snapshot_lookup.s3_block(self.kube, self.namespace, spec.source)
            keys_secret = await snapshot_lookup.keys_secret(self.kube, self.namespace, spec.source)
        except VerificationFailed as e:
            return Outcome(failure=(e.reason, e.message))
        cluster, cluster_spec = observed.target, observed.target_spec
        if status.source_key is None or status.sha256 is None:
            raise RuntimeError(f"seed pods for {self.name} were planned before its snapshot was verified")
        if status.revision_bump is None:
            raise RuntimeError(f"seed pods for {self.name} were planned before its revision bump was recorded")
        manifests = []
        for member in step.members:
            manifest = builders.restore_pod(
                self.name,
                self.namespace,
                cluster.name,
                member,
                status.seed_members,
                builders.restore_token(observed.uid),
                cluster_spec.image,
                self.operator_image,
                s3,
                status.source_key,
                status.sha256,
                status.snapshot_size,
                tls=step.tls,
                pull_secrets=cluster_builders.image_pull_secrets(cluster_spec),
                revision_bump=status.revision_bump,
                keys_secret=keys_secret,
            )
            kopf.adopt(manifest, owner=cast(kopf.Body, dict(self.body)))
            manifests.append(manifest)

        async def create(manifest: dict) -> str | None:
            await self._fence(observed)
            try:
                await self.kube.create(kube.PODS, self.namespace, manifest)
            except kube.Conflict:
                found = await self.kube.get(kube.PODS, self.namespace, manifest["metadata"]["name"])
                owners = [o.get("uid") for o in ((found or {}).get("metadata") or {}).get("ownerReferences") or []]
                if found is not None and observed.uid not in owners:
                    return manifest["metadata"]["name"]
            return None

        taken = [n for n in await asyncio.gather(*(create(m) for m in manifests)) if n]
        if taken:
            return Outcome(
                failure=("SeedPodNameTaken", f"pod {', '.join(taken)} exists and does not belong to this restore")
            )
        self.post_event(
            "Normal", "SeedingMembers", f"Restoring {', '.join(step.members)} from {status.source_key} in parallel"
        )
        faults.hit(faults.DURING_RESTORE)
        return None

    async def _mark_seeds(self, step: s.MarkSeedsRestored, spec, status, observed: Observed) -> None:
        for pvc in step.pvcs:
            await self.kube.merge_patch(
                kube.PVCS,
                self.namespace,
                pvc,
                {"metadata": {"annotations": {builders.ANNOTATION_RESTORED_BY: observed.uid}}},
            )
        self.post_event(
            "Normal",
            "SnapshotRestored",
            f"{', '.join(m for m, *_ in step.timings)}: data directory restored with etcdutl",
        )

    async def _retry_seed(self, step: s.RetrySeedPod, spec, status, observed) -> None:
        await self.kube.delete(kube.PODS, self.namespace, step.pod, uid=step.pod_uid)
        self.post_event("Warning", "SeedPodFailed", step.reason)

    async def _remove_seed_pods(self, step: s.RemoveSeedPods, spec, status, observed) -> None:
        for name, uid in step.pods:
            await self.kube.delete(kube.PODS, self.namespace, name, uid=uid)

    async def _release(self, step: s.ReleaseCluster, spec, status, observed: Observed) -> None:
        await self._patch_cluster(
            observed,
            {
                "metadata": {
                    "annotations": {
                        naming.ANNOTATION_RESTORE_IN_PROGRESS: None,
                        naming.ANNOTATION_RESTORE_HOLD: None,
                        builders.ANNOTATION_RESTORED_FROM: step.records,
                    }
                }
            },
        )
        self.post_event("Normal", "ClusterReleased", step.reason)

    async def _release_hold(self, step: s.ReleaseHold, spec, status, observed: Observed) -> None:
        await self._patch_cluster(
            observed,
            {
                "metadata": {
                    "annotations": {naming.ANNOTATION_RESTORE_IN_PROGRESS: None, naming.ANNOTATION_RESTORE_HOLD: None}
                }
            },
        )
        self.post_event("Normal", "ClusterReleased", step.reason)


HANDLERS: dict[type[s.Step], Handler] = {
    s.Idle: RestoreExecutor._nothing,
    s.Wait: RestoreExecutor._nothing,
    s.Fail: RestoreExecutor._fail,
    s.SkipAlreadyApplied: RestoreExecutor._skip,
    s.Complete: RestoreExecutor._complete,
    s.StartVerifying: RestoreExecutor._nothing,
    s.VerifySnapshot: RestoreExecutor._verify,
    s.PlanReplay: RestoreExecutor._plan_replay,
    s.StartReplayPod: RestoreExecutor._start_replay_pod,
    s.RecordReplayResult: RestoreExecutor._record_replay_result,
    s.RemoveReplayPod: RestoreExecutor._remove_replay_pod,
    s.FailReplay: RestoreExecutor._fail_replay,
    s.BeginRestore: RestoreExecutor._begin,
    s.CreateTargetCluster: RestoreExecutor._create_cluster,
    s.HoldCluster: RestoreExecutor._hold,
    s.ClearQuorumRecovery: RestoreExecutor._clear_recovery,
    s.StopMembers: RestoreExecutor._stop_members,
    s.RecordPreservedData: RestoreExecutor._record_preserved,
    s.SetAsideData: RestoreExecutor._set_aside,
    s.ChooseMembers: RestoreExecutor._choose_members,
    s.CreateSeedVolumes: RestoreExecutor._create_seed_volumes,
    s.StartSeedPods: RestoreExecutor._start_seed_pods,
    s.MarkSeedsRestored: RestoreExecutor._mark_seeds,
    s.RetrySeedPod: RestoreExecutor._retry_seed,
    s.RemoveSeedPods: RestoreExecutor._remove_seed_pods,
    s.ReleaseCluster: RestoreExecutor._release,
    s.ReleaseHold: RestoreExecutor._release_hold,
}
