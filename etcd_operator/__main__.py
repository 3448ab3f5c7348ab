"""Entry point: `python -m etcd_operator` runs kopf with the project's settings, behind a
Lease-based leader election when LEADER_ELECTION=true.

A leader that loses the right to act (see etcd_operator/core/leadership_fence.py) exits at once with
LOST_LEADERSHIP_EXIT_CODE: nothing it was doing needs finishing, since every step resumes
from observed state after a kill, and a graceful kopf stop would let handlers run on for
up to their cancellation timeout. The Deployment restarts the container as a standby."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys

import kopf

from etcd_operator.controllers import metrics
from etcd_operator.core.leadership_fence import AlwaysActs, LeaseClock, install_process_write_guard, writes_logger
from etcd_operator.core.shard import LEASE_NAME  # noqa: F401  the default, for tests
from etcd_operator.runtime.config import OperatorConfig
from etcd_operator.runtime.malloc_tuning import return_large_buffers_to_the_system
from etcd_operator.runtime.server import HealthServer

LOST_LEADERSHIP_EXIT_CODE = 3
CONFIG_ERROR_EXIT_CODE = 2
logger = logging.getLogger("etcd_operator")


async def run(config: OperatorConfig) -> int:
    import etcd_operator.runtime.operator  # noqa: F401  registers the handlers

    metrics.record_build_info()
    ready = asyncio.Event()
    stopping = _stop_on_signals()
    clock = LeaseClock(config.lease_timing) if config.leader_election else None
    health = HealthServer(
        config.health_port, ready, leading=clock.may_act if clock else None, address=config.health_address
    )
    await health.start()
    try:
        if clock is None:
            await _operate(config, ready, stopping)  # no process write guard: every write is allowed
            return 0
        return await _lead(config, ready, clock, stopping)
    finally:
        await health.stop()


def _stop_on_signals() -> asyncio.Event:
    """SIGTERM and SIGINT set the returned event from the start, also while a standby waits to
    lead and kopf has installed no handlers yet. In a container this process is PID 1, for which
    the kernel ignores a signal without a handler: a standby would run on until the kubelet's
    SIGKILL at the end of the grace period, and could even win the Lease meanwhile."""
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    return stopping


async def _operate(config: OperatorConfig, ready: asyncio.Event, stopping: asyncio.Event) -> None:
    await kopf.operator(
        clusterwide=config.clusterwide,
        namespaces=list(config.namespaces),
        standalone=True,
        ready_flag=ready,
        stop_flag=stopping,  # a signal received before kopf installed its own handlers
    )


async def _lead(config: OperatorConfig, ready: asyncio.Event, clock: LeaseClock, stopping: asyncio.Event) -> int:
    from etcd_operator.clients.kube.client import KubeClient
    from etcd_operator.runtime.lease_elector import LeaseElector

    # The Lease itself is written before this replica may act, so its client is not fenced.
    lease_client = await KubeClient.from_environment(guard=AlwaysActs())
    lease_name = config.shard.lease_name  # each shard its own Lease
    elector = LeaseElector(lease_client, config.lease_namespace, lease_name, config.identity, clock)
    install_process_write_guard(clock)  # every other Kubernetes and etcd client asks the lease
    t = config.lease_timing
    logger.info(
        "waiting to lead (lease %s/%s as %s; lease %gs, renew every %gs, stop acting %gs after the last renewal sent)",
        config.lease_namespace,
        lease_name,
        config.identity,
        t.lease_seconds,
        t.renew_every,
        t.stop_acting_seconds,
    )
    acquiring = asyncio.create_task(elector.acquire())
    stop_requested = asyncio.create_task(stopping.wait())
    await asyncio.wait({acquiring, stop_requested}, return_when=asyncio.FIRST_COMPLETED)
    if stopping.is_set():
        acquiring.cancel()
        logger.info("stopping while waiting to lead (signal received)")
        await elector.release()  # in case an attempt in flight won the Lease
        await lease_client.close()
        return 0
    stop_requested.cancel()
    if not acquiring.result():
        _exit_deposed(clock.ended or "acquired too late")
    operator = asyncio.create_task(_operate(config, ready, stopping))
    keeper = asyncio.create_task(elector.hold())
    await asyncio.wait({operator, keeper}, return_when=asyncio.FIRST_COMPLETED)
    if keeper.done():
        error = keeper.exception()
        _exit_deposed(f"the lease keeper failed: {error!r}" if error else keeper.result())
    # kopf stopped (SIGTERM, or it failed): stop acting first, then hand the Lease over.
    keeper.cancel()
    await elector.release()
    await lease_client.close()
    operator.result()
    return 0


def _exit_deposed(reason: str) -> None:
    logger.error(
        "lost leadership: %s; exiting now (status %d) to restart as a standby", reason, LOST_LEADERSHIP_EXIT_CODE
    )
    logging.shutdown()
    os._exit(LOST_LEADERSHIP_EXIT_CODE)


USAGE = """usage: python -m etcd_operator

Runs the etcd operator against the cluster of the in-cluster ServiceAccount or KUBECONFIG.
Settings come from the environment:
  WATCH_NAMESPACES   comma-separated names or globs to watch (default: every namespace)
  LEADER_ELECTION    true: a Lease elects the one replica that acts (POD_NAMESPACE holds it)
  SHARD_NAME         this instance's shard: its own Lease and finalizer (default: unsharded)
  SHARD_SELECTOR     label selector of the EtcdClusters, EtcdBackups and EtcdRestores it
                     works on (needs SHARD_NAME), e.g. "tenant in (a,b),tier!=test"
  WATCH_CHILDREN     false: every pass lists pods and PVCs instead of reading the watches
  STEADY_POLL_SECONDS  how often a steady cluster's members are polled (default 15)
  STEADY_POLL_MAX_SECONDS  ... backing off to this while its status stays unchanged (default 60)
  RESYNC_SECONDS     a full live pass per cluster about this often (default 600, jittered)
  HEALTH_PORT        /healthz, /readyz and /metrics (default 8080); HEALTH_ADDRESS binds it
  OPERATOR_IMAGE     the image restore pods run to fetch snapshots
  CLUSTER_DOMAIN     the Kubernetes cluster's DNS domain (default cluster.local)
  ADOPTION_ALLOW_CROSS_NAMESPACE  true: spec.adoption may name another namespace's members
  LOG_LEVEL          DEBUG, INFO (default), WARNING or ERROR
  LOG_FORMAT         plain (default) or json: one JSON object per line
Every setting, with its default (the Lease timings, MEMORY_BUDGET_BYTES, LOG_WRITES…):
docs/reference/operator-settings.md.
"""


def main() -> int:
    if any(arg in ("-h", "--help") for arg in sys.argv[1:]):
        print(USAGE, end="")
        return 0
    try:
        config = OperatorConfig.from_env()
    except ValueError as e:  # InvalidShardSetting, CLUSTER_DOMAIN, LOG_FORMAT, a number that is none
        print(f"etcd-operator: {e}", file=sys.stderr)
        return CONFIG_ERROR_EXIT_CODE
    return_large_buffers_to_the_system()
    from etcd_operator.runtime import logs  # imports the handlers, which registers them

    logs.configure(config.log_format, config.log_level)
    logger.info("%s", config.shard.describe())
    if config.log_writes:
        writes_logger.setLevel(logging.DEBUG)
    return asyncio.run(run(config))


if __name__ == "__main__":
    sys.exit(main())
