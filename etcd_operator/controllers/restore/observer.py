"""Gathers one pass's view of an EtcdRestore's target from Kubernetes. Reads only (the
new cluster's spec is checked with a server-side dry run, which stores nothing)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from etcd_operator.clients.kube import client as kube
from etcd_operator.clients.storage.credentials import missing_secrets
from etcd_operator.controllers.restore.point_in_time import list_catalogue
from etcd_operator.core import conditions as c
from etcd_operator.core.backup.keyring import decryption_secret
from etcd_operator.core.cluster import certs, naming
from etcd_operator.core.cluster.spec import ClusterSpec
from etcd_operator.core.restore import builders, replay_pod
from etcd_operator.core.restore.observed import (
    Catalogue,
    ObjectState,
    Observed,
    ReplayPod,
    SourceState,
    TargetCluster,
    parse_records,
)
from etcd_operator.core.restore.spec import BEFORE_RESTORING, RestoreSpec, RestoreStatus
from etcd_operator.core.shard import Shard
from etcd_operator.core.storage_policy import StoragePolicy

KINDS = (
    (kube.PODS, "Pod"),
    (kube.PVCS, "PersistentVolumeClaim"),
    (kube.SERVICES, "Service"),
    (kube.PDBS, "PodDisruptionBudget"),
)


def _pod_times(obj: Mapping[str, Any]) -> tuple[str, str]:
    """When the pod's first container started and its last one ended (RFC 3339, "" if unknown)."""
    status = obj.get("status") or {}
    states = [
        s.get("state") or {}
        for s in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])
    ]
    started = [
        t for state in states for t in [(state.get("running") or state.get("terminated") or {}).get("startedAt")] if t
    ]
    finished = [t for state in states for t in [(state.get("terminated") or {}).get("finishedAt")] if t]
    return (min(started) if started else ""), (max(finished) if finished else "")


def object_state(kind: str, obj: Mapping[str, Any]) -> ObjectState:
    meta = obj["metadata"]
    started, finished = _pod_times(obj) if kind == "Pod" else ("", "")
    return ObjectState(
        kind=kind,
        name=meta["name"],
        uid=meta["uid"],
        deleting=bool(meta.get("deletionTimestamp")),
        phase=(obj.get("status") or {}).get("phase", "") if kind == "Pod" else "",
        labels=tuple(sorted((meta.get("labels") or {}).items())),
        annotations=tuple(sorted((meta.get("annotations") or {}).items())),
        owner_uids=tuple(o.get("uid", "") for o in meta.get("ownerReferences") or []),
        created_at=meta.get("creationTimestamp") or "",
        started_at=started,
        finished_at=finished,
    )


def _hold_ack(ack: Any) -> tuple[str, str] | None:
    if not isinstance(ack, dict) or not ack.get("restore"):
        return None
    return str(ack["restore"]), str(ack.get("uid") or "")


def target_cluster(obj: Mapping[str, Any], shard: Shard = Shard()) -> TargetCluster:
    meta, status = obj["metadata"], obj.get("status") or {}
    annotations = meta.get("annotations") or {}
    try:
        spec, spec_error = ClusterSpec.from_dict(obj.get("spec") or {}), None
    except (TypeError, ValueError) as e:
        spec, spec_error = None, str(e)
    try:
        records, records_error = parse_records(annotations.get(builders.ANNOTATION_RESTORED_FROM)), None
    except ValueError as e:
        records, records_error = (), str(e)
    min_ordinal, _ = naming.min_ordinal(annotations)  # the cluster's own condition reports a bad one
    return TargetCluster(
        name=meta["name"],
        uid=meta["uid"],
        resource_version=meta.get("resourceVersion", ""),
        spec=spec,
        spec_error=spec_error,
        holder=annotations.get(naming.ANNOTATION_RESTORE_IN_PROGRESS) or None,
        hold_uid=annotations.get(naming.ANNOTATION_RESTORE_HOLD) or None,
        hold_ack=_hold_ack(status.get("restoreHold")),
        records=records,
        records_error=records_error,
        operation=(status.get("operation") or {}).get("kind") or None,
        recovery_approved=naming.ANNOTATION_APPROVE_QUORUM_RECOVERY in annotations,
        min_ordinal=min_ordinal,
        phase=status.get("phase"),
        available=(c.find(status.get("conditions"), "Available") or {}).get("status") == "True",
        ready_members=int(status.get("readyMembers") or 0),
        cluster_id=status.get("clusterID"),
        transport=(status.get("tls") or {}).get("transport"),
        outside_shard=shard.why_not_owned(meta.get("labels"), meta.get("finalizers")),
        deleting=bool(meta.get("deletionTimestamp")),
        revision=_highest_revision(status.get("members")),
    )


def _source_ready(source: SourceState) -> bool:
    """Whether the source's store may be read: its backup completed one, its Secrets exist."""
    return (
        source.backup_found
        and source.backup_completed
        and not source.missing_secrets
        and not source.credentials_refusal
    )


def _highest_revision(members: Any) -> int | None:
    """The highest revision among the members the cluster's status lists, None if none has one."""
    revisions = [m["revision"] for m in members or [] if isinstance(m, dict) and isinstance(m.get("revision"), int)]
    return max(revisions, default=None)


class RestoreObserver:
    def __init__(
        self, kube_client: kube.KubeClient, shard: Shard = Shard(), storage_policy: StoragePolicy = StoragePolicy()
    ):
        self.kube = kube_client
        self.shard = shard
        self.storage_policy = storage_policy

    async def observe(self, body: Mapping[str, Any], spec: RestoreSpec, status: RestoreStatus) -> Observed:
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        raw = await self.kube.get(kube.ETCDCLUSTERS, namespace, spec.target)
        cluster = target_cluster(raw, self.shard) if raw is not None else None
        pods: tuple[ObjectState, ...] = ()
        pvcs: tuple[ObjectState, ...] = ()
        preserved: tuple[ObjectState, ...] = ()
        around: tuple[ObjectState, ...] = ()
        problem = None
        if cluster is not None:
            selector = naming.label_selector(naming.selector_labels(spec.target))
            kept_selector = naming.label_selector({builders.LABEL_PRESERVED_FROM: spec.target})
            pods_raw, pvcs_raw, preserved_raw = await asyncio.gather(
                self.kube.list(kube.PODS, namespace, selector),
                self.kube.list(kube.PVCS, namespace, selector),
                self.kube.list(kube.PVCS, namespace, kept_selector),
            )
            pods = tuple(object_state("Pod", p) for p in pods_raw)
            pvcs = tuple(object_state("PersistentVolumeClaim", p) for p in pvcs_raw)
            preserved = tuple(object_state("PersistentVolumeClaim", p) for p in preserved_raw)
        elif not spec.in_place:
            around = await self._namespace_objects(namespace) + await self._secrets(namespace, spec)
            if status.phase in BEFORE_RESTORING:
                problem = await self._dry_run(name, namespace, spec)
        seed_pvcs: tuple[ObjectState, ...] = ()
        seed_pods: tuple[ObjectState, ...] = ()
        if status.seed_members:
            found = await asyncio.gather(
                *(self.kube.get(kube.PVCS, namespace, naming.pvc_name(m)) for m in status.seed_members)
            )
            seed_pvcs = tuple(object_state("PersistentVolumeClaim", p) for p in found if p)
        if len(name) <= builders.LABEL_VALUE_MAX:
            listed = await self.kube.list(kube.PODS, namespace, naming.label_selector({builders.LABEL_RESTORE: name}))
            seed_pods = tuple(object_state("Pod", p) for p in listed)
        source = None
        catalogue = None
        replay = None
        if not status.verified and status.phase in BEFORE_RESTORING:
            source = await self._source(namespace, spec)
            if spec.point is not None and status.point_in_time is None and _source_ready(source):
                catalogue = await self._catalogue(namespace, spec)
            if status.point_in_time is not None and status.point_in_time.replays:
                replay = await self._replay_pod(namespace, name, meta["uid"])
        return Observed(
            namespace=namespace,
            restore=name,
            uid=meta["uid"],
            generation=meta.get("generation") or 0,
            cluster=cluster,
            pods=pods,
            pvcs=pvcs,
            preserved_pvcs=preserved,
            namespace_objects=around,
            seed_pvcs=seed_pvcs,
            seed_pods=seed_pods,
            new_cluster_problem=problem,
            deleting=bool(meta.get("deletionTimestamp")),
            source=source,
            catalogue=catalogue,
            replay_pod=replay,
        )

    async def _catalogue(self, namespace: str, spec: RestoreSpec) -> Catalogue | None:
        backup = await self.kube.get(kube.ETCDBACKUPS, namespace, spec.backup or "")
        if backup is None:
            return None
        keys_secret = decryption_secret(spec.source, backup.get("spec"))
        return await list_catalogue(self.kube, namespace, backup, keys_secret)

    async def _replay_pod(self, namespace: str, restore: str, uid: str) -> ReplayPod | None:
        pod = await self.kube.get(kube.PODS, namespace, replay_pod.pod_name(restore))
        return None if pod is None else ReplayPod.from_pod(pod, uid, replay_pod.REPLAY_CONTAINER)

    async def _source(self, namespace: str, spec: RestoreSpec) -> SourceState:
        """Whether the source EtcdBackup exists and has completed a backup, and which of the
        Secrets its storage names are missing (a Secret's data is not read here)."""
        backup_name = (spec.source.get("backupRef") or {}).get("name")
        if backup_name is None:
            s3 = spec.source.get("s3") or {}
            return SourceState(
                missing_secrets=await self._missing(namespace, s3, decryption_secret(spec.source, None)),
                credentials_refusal=self.storage_policy.ambient_refusal(namespace, s3),
            )
        backup = await self.kube.get(kube.ETCDBACKUPS, namespace, backup_name)
        if backup is None:
            return SourceState(backup_name, backup_found=False, backup_completed=False)
        status = backup.get("status") or {}
        s3 = ((backup.get("spec") or {}).get("storage") or {}).get("s3") or {}
        return SourceState(
            backup_name,
            backup_completed=bool(status.get("lastSuccessfulTime")),
            backup_phase=status.get("phase") or "",
            missing_secrets=await self._missing(namespace, s3, decryption_secret(spec.source, backup.get("spec"))),
            credentials_refusal=self.storage_policy.ambient_refusal(namespace, s3),
        )

    async def _missing(self, namespace: str, s3: dict, keys_secret: str | None) -> tuple[str, ...]:
        """The storage's Secrets and the decryption keys' Secret that do not exist yet."""
        missing = await missing_secrets(self.kube, namespace, s3)
        if keys_secret and keys_secret not in missing:
            if await self.kube.get(kube.SECRETS, namespace, keys_secret) is None:
                missing += (keys_secret,)
        return missing

    async def _namespace_objects(self, namespace: str) -> tuple[ObjectState, ...]:
        listed = await asyncio.gather(*(self.kube.list(resource, namespace) for resource, _ in KINDS))
        return tuple(object_state(kind, obj) for (_, kind), objs in zip(KINDS, listed, strict=True) for obj in objs)

    async def _secrets(self, namespace: str, spec: RestoreSpec) -> tuple[ObjectState, ...]:
        """The Secrets of the names the new cluster would create that exist already (read one
        by one: no other Secret of the namespace is listed or read)."""
        stored = {"tls": {}, **spec.new_cluster_spec}  # as the API server stores it: spec.tls defaults to {} (on)
        try:
            names = certs.created_secret_names(ClusterSpec.from_dict(stored), spec.target)
        except (TypeError, ValueError, KeyError):
            return ()  # an unreadable spec fails the restore on its own (InvalidClusterSpec)
        found = await asyncio.gather(*(self.kube.get(kube.SECRETS, namespace, n) for n in names))
        return tuple(object_state("Secret", s) for s in found if s is not None)

    async def _dry_run(self, restore: str, namespace: str, spec: RestoreSpec) -> str | None:
        manifest = builders.new_cluster(restore, namespace, spec.target, spec.new_cluster_spec, restore_uid="dry-run")
        try:
            await self.kube.create(kube.ETCDCLUSTERS, namespace, manifest, dry_run=True)
        except kube.ApiError as e:
            return e.message
        except kube.Conflict:
            pass  # it exists now: the planner sees that next pass
        return None
