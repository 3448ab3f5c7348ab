"""Leader election on a coordination.k8s.io Lease, so that exactly one replica reconciles.
Standby replicas wait; a leader that cannot renew in time stops working at once."""

from __future__ import annotations

import asyncio
import datetime
import logging

from etcd_operator.kube import client as kube

logger = logging.getLogger(__name__)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _micro(ts: datetime.datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: str | None) -> datetime.datetime | None:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


class LeaseElector:
    def __init__(self, kube_client: kube.KubeClient, namespace: str, name: str, identity: str,
                 lease_seconds: int = 15, renew_every: float = 5.0):
        self.kube = kube_client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_seconds = lease_seconds
        self.renew_every = renew_every

    def _spec(self, lease: dict | None, acquired: bool) -> dict:
        now = _micro(_now())
        spec = dict((lease or {}).get("spec") or {})
        transitions = int(spec.get("leaseTransitions", 0))
        spec.update(holderIdentity=self.identity, leaseDurationSeconds=self.lease_seconds, renewTime=now)
        if acquired:
            spec.update(acquireTime=now, leaseTransitions=transitions + (1 if lease else 0))
        return spec

    async def try_acquire_or_renew(self) -> bool:
        lease = await self.kube.get(kube.LEASES, self.namespace, self.name)
        if lease is None:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace}, "spec": self._spec(None, True)}
            try:
                await self.kube.create(kube.LEASES, self.namespace, body)
                return True
            except kube.Conflict:
                return False
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        renewed = _parse(spec.get("renewTime"))
        duration = int(spec.get("leaseDurationSeconds") or self.lease_seconds)
        expired = renewed is None or (_now() - renewed).total_seconds() > duration
        if holder not in (self.identity, None, "") and not expired:
            return False
        patch = {"metadata": {"resourceVersion": lease["metadata"]["resourceVersion"]},
                 "spec": self._spec(lease, acquired=holder != self.identity)}
        try:
            await self.kube.merge_patch(kube.LEASES, self.namespace, self.name, patch)
        except kube.Conflict:
            return False  # someone else renewed or took it first
        return True

    async def acquire(self) -> None:
        while True:
            try:
                if await self.try_acquire_or_renew():
                    logger.info("became the leader (lease %s/%s)", self.namespace, self.name)
                    return
            except kube.ApiError as e:
                logger.warning("leader election: %s", e)
            await asyncio.sleep(self.renew_every)

    async def hold(self, lost: asyncio.Event) -> None:
        """Renews until a renewal cannot succeed within the lease duration; then sets `lost`."""
        last_renewal = asyncio.get_running_loop().time()
        while not lost.is_set():
            await asyncio.sleep(self.renew_every)
            try:
                if await self.try_acquire_or_renew():
                    last_renewal = asyncio.get_running_loop().time()
                    continue
                logger.error("leadership taken over by another replica")
                lost.set()
            except Exception as e:  # the API server may be briefly unreachable
                logger.warning("could not renew the lease: %s", e)
                if asyncio.get_running_loop().time() - last_renewal > self.lease_seconds - self.renew_every:
                    logger.error("lease expired without renewal; stopping")
                    lost.set()
