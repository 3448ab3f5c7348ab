"""Leader election on a coordination.k8s.io Lease, so that exactly one replica acts.

A candidate takes the Lease when it is absent, released, or unchanged for a full lease
duration on the candidate's own clock (RivalLease). The leader renews every few seconds;
its right to act (LeaseClock, the write guard) lasts until the last successful renewal's
SEND time plus the stop-acting deadline, which is shorter than the lease. Every Lease
write carries the resourceVersion it read, so two candidates can never both win."""

from __future__ import annotations

import asyncio
import logging
import math

from etcd_operator.clients.kube import client as kube
from etcd_operator.core.leadership_fence import LeaseClock, RivalLease
from etcd_operator.core.timefmt import now_micro_text

logger = logging.getLogger(__name__)


class LeaseTakenOver(Exception):
    """Another replica holds the Lease, or it was deleted under us."""


class LeaseElector:
    def __init__(self, kube_client: kube.KubeClient, namespace: str, name: str, identity: str, clock: LeaseClock):
        """`kube_client` must not be fenced by `clock` itself (the Lease is written before
        this replica may act)."""
        self.kube = kube_client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.clock = clock
        self.timing = clock.timing
        self.rival = RivalLease(clock.now)
        self._last_sent = clock.now()

    def _spec(self, previous: dict | None, acquire: bool) -> dict:
        now = now_micro_text()
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": math.ceil(self.timing.lease_seconds),
            "renewTime": now,
        }
        if acquire:
            transitions = int((previous or {}).get("leaseTransitions") or 0)
            spec.update(acquireTime=now, leaseTransitions=transitions + (1 if previous else 0))
        return spec

    async def _read(self) -> dict | None:
        return await self.kube.get(kube.LEASES, self.namespace, self.name)

    async def _write(self, lease: dict, spec: dict) -> bool:
        """Compare-and-swap on the resourceVersion read; False when someone wrote in between."""
        patch = {"metadata": {"resourceVersion": lease["metadata"]["resourceVersion"]}, "spec": spec}
        try:
            await self.kube.merge_patch(kube.LEASES, self.namespace, self.name, patch)
        except kube.Conflict:
            return False
        return True

    async def try_acquire(self) -> float:
        """One attempt to take the Lease; 0 when taken, else the seconds until the holder's
        lease would expire (the next attempt is worth making then)."""
        lease = await self._read()
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(None, True),
            }
            try:
                await self.kube.create(kube.LEASES, self.namespace, body)
            except kube.Conflict:
                return self.timing.renew_every
            return 0.0
        spec = lease.get("spec") or {}
        if spec.get("holderIdentity"):
            duration = max(float(spec.get("leaseDurationSeconds") or 0), self.timing.lease_seconds)
            left = self.rival.seconds_until_expiry(lease["metadata"]["resourceVersion"], duration)
            if left > 0:
                return left
            logger.info("the lease of %s was not renewed for %gs; taking over", spec["holderIdentity"], duration)
        return 0.0 if await self._write(lease, self._spec(spec, True)) else self.timing.renew_every

    async def try_renew(self) -> bool:
        """One renewal; False when it did not go through (try again); raises LeaseTakenOver."""
        lease = await self._read()
        if lease is None:
            raise LeaseTakenOver("the lease was deleted")
        holder = (lease.get("spec") or {}).get("holderIdentity")
        if holder != self.identity:
            raise LeaseTakenOver(f"the lease is now held by {holder or 'nobody'}")
        return await self._write(lease, self._spec(lease.get("spec"), False))

    async def acquire(self) -> bool:
        """Returns once this replica holds the Lease: True when it may act, False in the odd
        case where the winning attempt came back after its own deadline."""
        while True:
            sent = self.clock.now()
            wait = self.timing.renew_every
            try:
                wait = await asyncio.wait_for(self.try_acquire(), self.clock.attempt_timeout())
            except Exception as e:  # the API server may be briefly unreachable
                logger.warning("leader election: %s", str(e) or type(e).__name__)
            if wait <= 0:
                self._last_sent = sent
                if self.clock.renewed(sent):
                    logger.info("became the leader (lease %s/%s as %s)", self.namespace, self.name, self.identity)
                    return True
                return False
            await asyncio.sleep(min(max(wait, 0.05), self.timing.renew_every))

    async def hold(self) -> str:
        """Renews until this replica may no longer act; returns why. Never runs past the
        stop-acting deadline: each attempt's timeout ends there, and so does each sleep."""
        while self.clock.may_act():
            await asyncio.sleep(self.clock.delay_before_next_attempt(self._last_sent))
            timeout = self.clock.attempt_timeout()
            if timeout <= 0:
                break
            sent = self._last_sent = self.clock.now()
            try:
                if await asyncio.wait_for(self.try_renew(), timeout):
                    self.clock.renewed(sent)
            except LeaseTakenOver as e:
                self.clock.end(str(e))
            except Exception as e:  # not renewed this time; the deadline decides
                logger.warning(
                    "could not renew the lease (%.1fs left to act): %s",
                    self.clock.time_left(),
                    str(e) or type(e).__name__,
                )
        return self.clock.ended or "the right to act ended"

    async def release(self) -> None:
        """Hands the Lease back after this replica stopped acting, so a standby takes over
        at once instead of after a lease duration."""
        self.clock.end("released the lease")
        try:
            lease = await asyncio.wait_for(self._read(), self.timing.attempt_timeout)
            if lease is not None and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                await asyncio.wait_for(
                    self._write(lease, {"holderIdentity": None, "renewTime": now_micro_text()}),
                    self.timing.attempt_timeout,
                )
                logger.info("released the lease %s/%s", self.namespace, self.name)
        except Exception as e:
            logger.warning("could not release the lease (it expires on its own): %s", str(e) or type(e).__name__)
