"""What every concern of the cluster executor shares while it takes one step: the clients,
the EtcdCluster as the pass read it, and the writes that go through the executor's fences
(the fences themselves are cluster/executor.py's; a concern only calls them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

import kopf

from etcd_operator.clients.etcd.client import EtcdMemberClient
from etcd_operator.clients.etcd.pool import EtcdClientPool
from etcd_operator.clients.kube import client as kube
from etcd_operator.clients.kube.client import KubeClient, Resource
from etcd_operator.core.cluster import admission, ownership
from etcd_operator.core.cluster.observed import Observed, PodAdmission
from etcd_operator.core.cluster.recorded import ClusterStatus
from etcd_operator.core.cluster.spec import ClusterSpec
from etcd_operator.core.outcome import EventPoster, Outcome

MEMBER_RESOURCES = (kube.PODS, kube.PVCS)


class NotYet(Exception):
    """The step cannot be taken right now (etcd said so); try again next pass."""


class NameCollision(Exception):
    """An object of a child's name exists and is not the operator's (cluster/ownership.py):
    nothing was written to it."""

    def __init__(self, kind: str, name: str, why: str):
        super().__init__(ownership.describe(ownership.ref(kind, name), why))
        self.ref = ownership.ref(kind, name)
        self.why = why


class PodRefused(Exception):
    """The API server refused to create a member pod; nothing was created."""

    def __init__(self, answer: PodAdmission):
        super().__init__(admission.describe(answer))
        self.answer = answer


@dataclasses.dataclass(frozen=True)
class StepContext:
    kube: KubeClient
    etcd_clients: EtcdClientPool
    body: Mapping[str, Any]  # the EtcdCluster as the pass read it
    post_event: EventPoster
    fence: Callable[[], None]  # raises once the cluster is being deleted
    hold_fence: Callable[[str], None]  # raises while a restore holds the cluster; the argument says what is refused
    operator_namespace: str  # where the operator's pods run (NetworkPolicy)
    operator_image: str  # a joining TLS member's init container (builders.peer_name_container)
    status: ClusterStatus  # what the EtcdCluster's status recorded when the pass began
    now: float  # the pass's wall clock, as the planner had it

    @property
    def cluster(self) -> str:
        return str(self.body["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.body["metadata"]["namespace"])

    @property
    def token(self) -> str:
        return str(self.body["metadata"]["uid"])

    def owned(self, manifest: dict) -> dict:
        kopf.adopt(manifest, owner=cast(kopf.Body, dict(self.body)))
        return manifest

    async def create(self, resource: Resource, manifest: dict) -> None:
        """Creates `manifest` as is: the caller decides whether the cluster owns it."""
        self.fence()
        if resource in MEMBER_RESOURCES:
            self.hold_fence(f"{resource.plural} {manifest['metadata']['name']}")
        try:
            await self.kube.create(resource, self.namespace, manifest)
        except kube.Conflict:
            pass  # created by an earlier, interrupted attempt

    async def apply(self, resource: Resource, manifest: dict) -> dict:
        """Creates the child `manifest`, or converges the one the operator created before; an
        object of its name that is not the operator's is never written (NameCollision). The
        update goes with the resourceVersion and uid just read as preconditions, so an object
        replaced or changed since is not written either (NotYet). Returns the object stored."""
        name, kind = manifest["metadata"]["name"], manifest["kind"]
        self.fence()
        current = await self.kube.get(resource, self.namespace, name)
        if current is None:
            try:
                created = await self.kube.create(resource, self.namespace, manifest)
            except kube.Conflict:
                raise NotYet(f"{kind} {name} appeared after this step looked; the next pass reads it") from None
            return self._stored(created, kind, name)
        meta = current["metadata"]
        why = ownership.foreign_reason(meta, self.cluster, self.token)
        if why:
            raise NameCollision(kind, name, why)
        preconditions = {"resourceVersion": meta["resourceVersion"], "uid": meta["uid"]}
        pinned = {**manifest, "metadata": {**manifest["metadata"], **preconditions}}
        self.fence()
        try:
            written = await self.kube.apply(resource, self.namespace, pinned)
        except kube.Conflict:
            raise NotYet(f"{kind} {name} changed after this step read it; the next pass reads it again") from None
        return self._stored(written, kind, name)

    async def delete(self, resource: Resource, kind: str, name: str) -> bool:
        """Deletes the child `name` if it is the operator's (that incarnation only, by uid);
        False when absent. An object of its name that is not the operator's is never deleted
        (NameCollision)."""
        self.fence()
        current = await self.kube.get(resource, self.namespace, name)
        if current is None:
            return False
        why = ownership.foreign_reason(current["metadata"], self.cluster, self.token)
        if why:
            raise NameCollision(kind, name, why)
        return await self.kube.delete(resource, self.namespace, name, uid=current["metadata"]["uid"])

    def _stored(self, written: dict | None, kind: str, name: str) -> dict:
        if written is None:
            raise NotYet(f"{kind} {name}: its namespace or the object is gone")
        return written

    def leader_client(self, observed: Observed) -> EtcdMemberClient:
        leader = observed.etcd.leader_id
        endpoint = observed.etcd.endpoints.get(leader) if leader is not None else None
        if not endpoint:
            raise NotYet("no reachable leader")
        return self.etcd_clients.get(endpoint)

    def member_client(self, observed: Observed, member_id: int) -> EtcdMemberClient:
        endpoint = observed.etcd.endpoints.get(member_id)
        if not endpoint:
            raise NotYet(f"member {member_id:x} does not answer")
        return self.etcd_clients.get(endpoint)


# A step's handler: (context, action, acting spec, observed) -> its outcome; None: done.
Handler = Callable[[StepContext, Any, ClusterSpec, Observed], Awaitable[Outcome | None]]
