"""Gathers one pass's view of a cluster from Kubernetes and from the members themselves."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import aiohttp

from etcd_operator.clients.etcd.client import EtcdError
from etcd_operator.clients.etcd.pool import EtcdClientPool
from etcd_operator.clients.etcd.scrape import ScrapeError, read_metrics
from etcd_operator.clients.kube import client as kube
from etcd_operator.controllers.cluster.auth_observer import observe_auth
from etcd_operator.controllers.cluster.tls_observer import HTTPS, TLSSecrets, served_certificates
from etcd_operator.core import versions
from etcd_operator.core.cluster import admission, adoption, hibernation, learners, naming, quota
from etcd_operator.core.cluster.identity import member_list_sources, parse_hex_id, split_foreign
from etcd_operator.core.cluster.metrics_sample import cluster_version_from_gauge
from etcd_operator.core.cluster.observed import (
    BackupSnapshot,
    EtcdView,
    MemberStatus,
    Observed,
    PodAdmission,
    PodView,
    PVCView,
    VolumePin,
)
from etcd_operator.core.cluster.recorded import ClusterStatus
from etcd_operator.core.cluster.spec import ClusterSpec
from etcd_operator.core.cluster.timers import Sightings, carry_timers
from etcd_operator.core.hibernation import SNAPSHOTTING, STOPPING

STATUS_TIMEOUT = 2.0
logger = logging.getLogger(__name__)
T = TypeVar("T")


async def answer_unless_changed(call: Awaitable[T], changed: asyncio.Event, timeout: float) -> T:
    """`call`'s answer, or TimeoutError after `timeout` or as soon as `changed` is set. For a
    member whose pod is being deleted: once its pod is gone (the change that sets the event),
    its address may lead nowhere and the call would wait out its whole timeout."""
    answer = asyncio.ensure_future(call)
    change = asyncio.ensure_future(changed.wait())
    try:
        done, _ = await asyncio.wait({answer, change}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if answer in done:
            return answer.result()
        raise TimeoutError("its pod is being deleted and changed before it answered" if done else "")
    finally:
        answer.cancel()
        change.cancel()


async def fetch_cluster_version(endpoint: str | None) -> str | None:
    """etcd's cluster version ("3.5.0") from a member's gauge `etcd_cluster_version`, read
    on its plain-HTTP metrics port, which needs no client certificate on a TLS cluster; the
    page is read only up to the gauge's lines. None if the member does not say."""
    if not endpoint:
        return None
    host = endpoint.rsplit(":", 1)[0]
    try:
        page = await read_metrics(
            f"http://{host}:{naming.METRICS_PORT}/metrics", STATUS_TIMEOUT, series=CLUSTER_VERSION_GAUGE
        )
    except ScrapeError as e:
        logger.debug("no cluster version from %s: %s", endpoint, e)
        return None
    return cluster_version_from_gauge(page.splitlines(keepends=True))


CLUSTER_VERSION_GAUGE = b'etcd_cluster_version{cluster_version="'


def pod_view(pod: Mapping[str, Any]) -> PodView:
    meta, status = pod["metadata"], pod.get("status") or {}
    annotations = meta.get("annotations") or {}
    conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
    containers = status.get("containerStatuses") or []
    # Init containers first: one that cannot start (its image not pulled) holds etcd in PodInitializing.
    waiting = next(
        (
            c["state"]["waiting"].get("reason")
            for c in (status.get("initContainerStatuses") or []) + containers
            if (c.get("state") or {}).get("waiting")
        ),
        None,
    )
    return PodView(
        name=meta["name"],
        uid=meta["uid"],
        member_id=parse_hex_id(annotations.get(naming.ANNOTATION_MEMBER_ID)),
        phase=status.get("phase", "Pending"),
        ready=conditions.get("Ready") == "True",
        deleting=bool(meta.get("deletionTimestamp")),
        ip=status.get("podIP"),
        spec_hash=annotations.get(naming.ANNOTATION_SPEC_HASH),
        initial_state=annotations.get(naming.ANNOTATION_INITIAL_STATE, ""),
        initial_cluster=annotations.get(naming.ANNOTATION_INITIAL_CLUSTER, ""),
        force_new_cluster=annotations.get(naming.ANNOTATION_FORCE_NEW_CLUSTER) == "true",
        restart_count=sum(c.get("restartCount", 0) for c in containers),
        waiting_reason=waiting,
        started=all(c.get("started", False) for c in containers) if containers else False,
        quota_bytes=quota_arg((pod.get("spec") or {}).get("containers") or []),
    )


def quota_arg(containers: list) -> int | None:
    for container in containers:
        for arg in container.get("args") or []:
            if arg.startswith("--quota-backend-bytes="):
                return quota.parse_quantity(arg.split("=", 1)[1])
    return None


def pvc_view(
    pvc: Mapping[str, Any], expandable: Mapping[str, bool] | None = None, cluster_uid: str | None = None
) -> PVCView:
    """`expandable`: allowVolumeExpansion by StorageClass name, for the classes that were read."""
    meta, spec = pvc["metadata"], pvc.get("spec") or {}
    storage_class = spec.get("storageClassName")
    return PVCView(
        name=meta["name"],
        uid=meta["uid"],
        member_id=parse_hex_id((meta.get("annotations") or {}).get(naming.ANNOTATION_MEMBER_ID)),
        deleting=bool(meta.get("deletionTimestamp")),
        storage_class=storage_class,
        requested=quota.parse_quantity(((spec.get("resources") or {}).get("requests") or {}).get("storage")),
        capacity=quota.parse_quantity(((pvc.get("status") or {}).get("capacity") or {}).get("storage")),
        expandable=(expandable or {}).get(storage_class or "") if storage_class else False,
        restored=naming.ANNOTATION_RESTORED_BY in (meta.get("annotations") or {}),
        initial_cluster=(meta.get("annotations") or {}).get(naming.ANNOTATION_INITIAL_CLUSTER, ""),
        bound=(pvc.get("status") or {}).get("phase") == "Bound"
        or SELECTED_NODE_ANNOTATION in (meta.get("annotations") or {}),
        owned_by_cluster=bool(cluster_uid)
        and any(o.get("uid") == cluster_uid for o in meta.get("ownerReferences") or []),
    )


HOSTNAME_LABEL = "kubernetes.io/hostname"
# Set by the scheduler on a PVC of a WaitForFirstConsumer class once a pod using it is placed.
SELECTED_NODE_ANNOTATION = "volume.kubernetes.io/selected-node"
# Answers that tell nothing of a node: refused (no rights), failed, or none in time.
UNREADABLE = (kube.ApiError, aiohttp.ClientError, asyncio.TimeoutError)


def pinned_hostname(pv: Mapping[str, Any]) -> str | None:
    """The one hostname a PV's required node affinity allows (local volumes: local-path,
    `local`), or None when it allows none or several, or says nothing of hostnames."""
    terms = (((pv.get("spec") or {}).get("nodeAffinity") or {}).get("required") or {}).get("nodeSelectorTerms") or []
    hostnames = set()
    for term in terms:  # the terms are ORed: each must pin the same one host
        pins = [
            e.get("values") or []
            for e in term.get("matchExpressions") or []
            if e.get("key") == HOSTNAME_LABEL and e.get("operator") == "In"
        ]
        if len(pins) != 1 or len(pins[0]) != 1:
            return None
        hostnames.add(pins[0][0])
    return hostnames.pop() if len(hostnames) == 1 else None


async def volume_pin(kube_client: kube.KubeClient, pvc: Mapping[str, Any]) -> VolumePin | None:
    """Where a bound PVC's volume lives and whether that node is still in the API. Only an
    answer that no Node has the PV's hostname counts as gone; an error reading the PV or
    the Nodes (no rights in a namespaced install) leaves it unknown. None: not bound."""
    volume = (pvc.get("spec") or {}).get("volumeName")
    if not volume or (pvc.get("status") or {}).get("phase") != "Bound":
        return None
    try:
        pv = await kube_client.get(kube.PVS, None, volume)
    except UNREADABLE as e:
        return VolumePin(None, unknown=f"cannot read PersistentVolume {volume}: {str(e) or type(e).__name__}")
    if pv is None:
        return VolumePin(None, unknown=f"PersistentVolume {volume} is not found")
    hostname = pinned_hostname(pv)
    if hostname is None:
        return VolumePin(None)
    # By label, not by name: the affinity matches the Node's hostname label, which may differ
    # from its name; a GET by that value could miss a Node that is there.
    try:
        nodes = await kube_client.list(kube.NODES, None, naming.label_selector({HOSTNAME_LABEL: hostname}))
    except UNREADABLE as e:
        return VolumePin(hostname, unknown=f"cannot read Nodes: {str(e) or type(e).__name__}")
    return VolumePin(hostname, node_gone=not nodes)


async def pin_waiting_volumes(
    kube_client: kube.KubeClient, pvcs: dict[str, PVCView], pvcs_raw: list[dict], pods: dict[str, PodView]
) -> dict[str, PVCView]:
    """`pvcs` with the pins of the volumes whose member pod is Pending: only there does the
    planner ask whether a node is gone, so a steady cluster costs no reads."""
    waiting = [
        raw
        for raw in pvcs_raw
        if (pod := pods.get(naming.pvc_member(raw["metadata"]["name"]))) and pod.phase == "Pending" and not pod.deleting
    ]
    pins = await asyncio.gather(*(volume_pin(kube_client, raw) for raw in waiting))
    pinned = {raw["metadata"]["name"]: pin for raw, pin in zip(waiting, pins, strict=True) if pin is not None}
    return {name: dataclasses.replace(pvc, pin=pinned[name]) if name in pinned else pvc for name, pvc in pvcs.items()}


def member_endpoint(pod: PodView) -> str | None:
    return f"{pod.ip}:{naming.CLIENT_PORT}" if pod.ip else None


class StorageClassExpansion:
    """allowVolumeExpansion by StorageClass, shared by every cluster of the operator: read
    again once older than `ttl` seconds, or on demand (`live`)."""

    def __init__(self, kube_client: kube.KubeClient, ttl: float, clock: Callable[[], float] = time.monotonic):
        self.kube = kube_client
        self.ttl = ttl
        self.clock = clock
        self._known: dict[str, tuple[float, bool | None]] = {}  # name -> (read at, allowed; None: absent)

    async def lookup(self, names: set[str | None], live: bool = False) -> dict[str, bool]:
        """allowVolumeExpansion of each named StorageClass that could be read."""
        found = {}
        for name in sorted(n for n in names if n):
            known = self._known.get(name)
            if live or known is None or self.clock() - known[0] >= self.ttl:
                try:
                    storage_class = await self.kube.get(kube.STORAGECLASSES, None, name)
                except kube.ApiError:
                    self._known.pop(name, None)
                    continue  # unknown: nothing is expanded, a condition says why
                known = (
                    self.clock(),
                    None if storage_class is None else bool(storage_class.get("allowVolumeExpansion")),
                )
                self._known[name] = known
            if known[1] is not None:
                found[name] = known[1]
        return found


class ClusterObserver:
    def __init__(
        self,
        kube_client: kube.KubeClient,
        etcd_clients: EtcdClientPool,
        storage_classes: StorageClassExpansion | None = None,
        secrets: TLSSecrets | None = None,
        clock: Callable[[], float] = time.monotonic,
        cluster_domain: str = naming.DEFAULT_CLUSTER_DOMAIN,
        adoption_cross_namespace: bool = False,
        child_changed: asyncio.Event | None = None,
    ):
        """`child_changed`: set when a pod or PVC of the cluster changes during a pass (the
        daemon's wake-up, cleared as each pass starts); it cuts short the wait for a member
        whose pod is being deleted."""
        self.kube = kube_client
        self.child_changed = child_changed
        self.cluster_domain = cluster_domain
        self.adoption_cross_namespace = adoption_cross_namespace  # ADOPTION_ALLOW_CROSS_NAMESPACE
        self.etcd_clients = etcd_clients
        self.storage_classes = storage_classes or StorageClassExpansion(kube_client, ttl=0.0)
        self.secrets = secrets or TLSSecrets()
        # What this process saw unhealthy, and since when on `clock` (cluster/timers.py): the
        # memory that times replacements and quorum recovery, lost with the process.
        self.clock = clock
        self.sightings = Sightings()
        # The API server's answers for member pods (dry runs, refused creates), on `clock`.
        self.admissions: admission.Memory = {}
        # When this process sent each learner an entry, on `clock` (cluster/learners.py).
        self.learner_entries: learners.EntryMemory = {}
        # Children other than the certificate Secrets that the last write found held by an
        # object that is not the operator's ("Kind name" -> why; cluster/ownership.py).
        self.collisions: dict[str, str] = {}
        # ... and the one a step found (a member PVC a bootstrap did not create), until a step is taken.
        self.step_collisions: dict[str, str] = {}

    def remember(self, answer: PodAdmission) -> None:
        self.admissions = admission.remember(self.admissions, answer, self.clock())

    def remember_learner_entry(self, member_id: int) -> None:
        self.learner_entries = learners.remember_entry(self.learner_entries, member_id, self.clock())

    async def observe(
        self,
        body: Mapping[str, Any],
        status: ClusterStatus,
        children: tuple[list[dict], list[dict]] | None = None,
        live_secrets: bool = True,
    ) -> Observed:
        """`status`: what the EtcdCluster's status recorded (its cluster ID, a learner's join
        failure). `children`: the cluster's (pods, PVCs) from the operator's caches; None lists
        them live, with the StorageClasses and (unless `live_secrets` is False) the TLS Secrets."""
        meta = body["metadata"]
        cluster, namespace = meta["name"], meta["namespace"]
        live = children is None
        if children is None:
            selector = naming.label_selector(naming.selector_labels(cluster))
            children = await asyncio.gather(
                self.kube.list(kube.PODS, namespace, selector),
                self.kube.list(kube.PVCS, namespace, selector),
            )
        pods_raw, pvcs_raw = children
        pods = {p.name: p for p in map(pod_view, pods_raw)}
        # A StorageClass setting up to a TTL old: the API server itself refuses an expansion
        # its class does not allow, so a stale answer can only delay or fail a resize.
        expandable = await self.storage_classes.lookup(
            {(p.get("spec") or {}).get("storageClassName") for p in pvcs_raw}
        )
        pvcs = {p.name: p for p in (pvc_view(raw, expandable, meta["uid"]) for raw in pvcs_raw)}
        pvcs = await pin_waiting_volumes(self.kube, pvcs, pvcs_raw, pods)
        min_ordinal, min_ordinal_problem = naming.min_ordinal(meta.get("annotations") or {})
        tls, credentials = await self.secrets.observe(self.kube, body, live=live or live_secrets)
        await self.etcd_clients.use_tls(credentials)
        spec = ClusterSpec.from_dict(body.get("spec") or {})
        # While adopting: the foreign members' endpoints too (cluster/adoption.py).
        adopted = adoption.dial_endpoints(spec, status, namespace, self.adoption_cross_namespace)
        etcd = await self.observe_etcd(pods, adoption.expected_cluster_id(spec, status), adopted)
        auth_view = await observe_auth(
            self.kube,
            self.etcd_clients,
            body,
            spec,
            status.auth,
            etcd,
            serves_tls=tls.transport == HTTPS,
        )
        await self.etcd_clients.retain_only({e for e in map(member_endpoint, pods.values()) if e} | set(adopted))

        observed = Observed(
            cluster=cluster,
            namespace=namespace,
            uid=meta["uid"],
            pods=pods,
            pvcs=pvcs,
            etcd=etcd,
            unhealthy_for={},
            no_quorum_for=None,
            running_version=min((s.version for s in etcd.statuses.values()), key=versions.parse, default=None),
            recovery_approved=(meta.get("annotations") or {}).get(naming.ANNOTATION_APPROVE_QUORUM_RECOVERY) == "true",
            restoring=(meta.get("annotations") or {}).get(naming.ANNOTATION_RESTORE_IN_PROGRESS),
            restore_hold=(meta.get("annotations") or {}).get(naming.ANNOTATION_RESTORE_HOLD),
            min_ordinal=min_ordinal,
            annotation_problems=(min_ordinal_problem,) if min_ordinal_problem else (),
            tls=tls,
            # Read only while a downgrade is recorded: no other decision reads it, and each read
            # has the leader render its whole metrics page.
            cluster_version=await fetch_cluster_version(
                etcd.endpoints.get(etcd.leader_id) if etcd.leader_id is not None else None
            )
            if status.downgrade_target is not None
            else None,
            defrag_requested=(meta.get("annotations") or {}).get(naming.ANNOTATION_DEFRAGMENT) or None,
            leader_move_requested=(meta.get("annotations") or {}).get(naming.ANNOTATION_MOVE_LEADER) or None,
            cluster_domain=self.cluster_domain,
            adoption_cross_namespace=self.adoption_cross_namespace,
            auth=auth_view,
            collisions={**self.collisions, **self.step_collisions},
        )
        if tls.rotation is not None or tls.awaits_peer_identity:
            observed = dataclasses.replace(
                observed, tls=dataclasses.replace(tls, served=await served_certificates(pods, credentials))
            )
        if status.hibernation is not None and status.hibernation.state in (SNAPSHOTTING, STOPPING):
            observed = dataclasses.replace(observed, snapshot_backups=await self.snapshot_backups(namespace, cluster))
        monotonic_now = self.clock()
        observed, self.sightings = carry_timers(status, observed, self.sightings, monotonic_now)
        observed, self.learner_entries = learners.carry_entries(observed, self.learner_entries, monotonic_now)
        return admission.carry(observed, self.admissions, monotonic_now)

    async def snapshot_backups(self, namespace: str, cluster: str) -> tuple[BackupSnapshot, ...] | None:
        """The EtcdBackups a cluster going to sleep waits for; None when they cannot be read."""
        try:
            listed = await self.kube.list(kube.ETCDBACKUPS, namespace)
        except UNREADABLE as e:
            logger.warning("%s/%s: cannot list EtcdBackups: %s", namespace, cluster, str(e) or type(e).__name__)
            return None
        return hibernation.snapshot_backups(cluster, listed)

    async def observe_etcd(
        self, pods: dict[str, PodView], recorded_cluster_id: int | None, foreign_endpoints: tuple[str, ...] = ()
    ) -> EtcdView:
        """`foreign_endpoints`: the members of a cluster being adopted, named by their endpoint."""
        endpoints = {name: endpoint for name, p in pods.items() if (endpoint := member_endpoint(p))}
        endpoints.update({e: e for e in foreign_endpoints if e not in endpoints.values()})

        leaving = {member_endpoint(p) for p in pods.values() if p.deleting}

        async def status_of(endpoint: str):
            call = self.etcd_clients.get(endpoint).status()
            try:
                if endpoint in leaving and self.child_changed is not None:
                    return await answer_unless_changed(call, self.child_changed, STATUS_TIMEOUT)
                return await asyncio.wait_for(call, STATUS_TIMEOUT)
            except (TimeoutError, EtcdError) as e:
                return e

        results = await asyncio.gather(*(status_of(e) for e in endpoints.values()))
        errors: dict[str, str] = {}
        answers: dict[str, MemberStatus] = {}
        for (name, endpoint), result in zip(endpoints.items(), results, strict=True):
            if isinstance(result, Exception):
                errors[name] = str(result) or type(result).__name__
            else:
                answers[endpoint] = result
        by_endpoint, foreign = split_foreign(answers, recorded_cluster_id)
        for endpoint, cluster_id in foreign.items():
            errors[endpoint] = f"answers for another cluster ({cluster_id:x}); not trusted"
        statuses = {s.member_id: s for s in by_endpoint.values()}
        endpoint_of = {s.member_id: endpoint for endpoint, s in by_endpoint.items()}
        if not statuses:
            return EtcdView(errors=errors, foreign=foreign)

        for endpoint in member_list_sources(by_endpoint):
            try:
                cluster_id, members = await asyncio.wait_for(
                    self.etcd_clients.get(endpoint).member_list(), STATUS_TIMEOUT
                )
            except (TimeoutError, EtcdError) as e:
                errors[endpoint] = str(e) or type(e).__name__
                continue
            status = by_endpoint[endpoint]
            if cluster_id != status.cluster_id:
                errors[endpoint] = f"member list for another cluster ({cluster_id:x}); not trusted"
                continue
            return EtcdView(
                members=tuple(members),
                statuses=statuses,
                cluster_id=cluster_id,
                leader_id=status.leader_id or None,
                from_leader=bool(status.leader_id) and status.leader_id == status.member_id,
                errors=errors,
                endpoints=endpoint_of,
                foreign=foreign,
            )
        return EtcdView(statuses=statuses, errors=errors, endpoints=endpoint_of, foreign=foreign)
