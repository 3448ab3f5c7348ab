"""Fault points: named places where a test can make the operator die at once, to prove
that every step resumes from observed state, or make a pass late. Enabled only through
ETCD_OPERATOR_FAULTS."""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
from collections.abc import Awaitable, Callable

logger = logging.getLogger(__name__)

AFTER_MEMBER_ADD = "after-member-add"
AFTER_MEMBER_REMOVE = "after-member-remove"
AFTER_BOOTSTRAP_PVCS = "after-bootstrap-pvcs"  # every PVC of a static bootstrap created, no pod yet
DURING_BACKUP_UPLOAD = "during-backup-upload"
DURING_RESTORE = "during-restore"
# The first backup pass after the one that recorded its verification's scratch pod: the
# attempt must resume with that same pod.
AFTER_SCRATCH_POD_RECORDED = "after-scratch-pod-recorded"
# The first cluster pass that begins without a restore hold waits until the live object
# carries one, then STALE_PASS_LAG seconds more, and goes on with the copy it took: a daemon
# whose pass decides on an old copy and acts late (its re-observation can come seconds later).
STALE_CLUSTER_PASS = "stale-cluster-pass"
# The first restore pass that decided CreateSeedVolumes waits until the live target EtcdCluster
# is being deleted (or gone), then STALE_PASS_LAG seconds more, and goes on with its decision.
STALE_RESTORE_PASS = "stale-restore-pass"
STALE_PASS_LAG = "ETCD_OPERATOR_STALE_PASS_LAG"  # seconds; default 10
STALL_POLL = 0.2
_stalled: set[str] = set()


def enabled() -> frozenset[str]:
    return frozenset(p.strip() for p in os.environ.get("ETCD_OPERATOR_FAULTS", "").split(",") if p.strip())


def hit(point: str) -> None:
    """Exits the process without any cleanup when `point` is enabled."""
    if point in enabled():
        logger.error("fault point %s reached: exiting now", point)
        logging.shutdown()
        os._exit(86)


async def stall_once(point: str, key: str, until: Callable[[], bool | Awaitable[bool]]) -> None:
    """When `point` is enabled, the first call for `key` waits until `until()` (or what it
    returns, awaited) is true, then STALE_PASS_LAG seconds more. Every later call returns at once."""
    if point not in enabled() or key in _stalled:
        return
    _stalled.add(key)
    logger.warning("fault point %s: %s waits for its condition", point, key)
    while not await _holds(until):  # noqa: ASYNC110 (a test's predicate: no event to wait on)
        await asyncio.sleep(STALL_POLL)
    lag = float(os.environ.get(STALE_PASS_LAG, "10"))
    logger.warning("fault point %s: %s goes on %gs late", point, key, lag)
    await asyncio.sleep(lag)


async def _holds(until: Callable[[], bool | Awaitable[bool]]) -> bool:
    result = until()
    return bool(await result) if inspect.isawaitable(result) else bool(result)
