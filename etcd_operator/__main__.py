"""Entry point: `python -m etcd_operator` runs kopf with the project's settings, behind a
Lease-based leader election when LEADER_ELECTION=true."""

from __future__ import annotations

import asyncio
import logging
import sys

import kopf

from etcd_operator.config import OperatorConfig
from etcd_operator.memory import return_large_buffers_to_the_system
from etcd_operator.server import HealthServer

LEASE_NAME = "etcd-operator-leader"
logger = logging.getLogger("etcd_operator")


async def run(config: OperatorConfig) -> int:
    import etcd_operator.operator  # noqa: F401  registers the handlers

    ready = asyncio.Event()
    health = HealthServer(config.health_port, ready)
    await health.start()
    stop = asyncio.Event()
    holder = None
    try:
        if config.leader_election:
            from etcd_operator.kube.client import KubeClient
            from etcd_operator.leader import LeaseElector

            kube = await KubeClient.from_environment()
            elector = LeaseElector(kube, config.lease_namespace, LEASE_NAME, config.identity)
            logger.info("waiting to lead (lease %s/%s as %s)", config.lease_namespace, LEASE_NAME, config.identity)
            await elector.acquire()
            holder = asyncio.create_task(elector.hold(stop))
        await kopf.operator(
            clusterwide=config.clusterwide,
            namespaces=list(config.namespaces),
            standalone=True,
            stop_flag=stop,
            ready_flag=ready,
        )
    finally:
        if holder is not None:
            holder.cancel()
        await health.stop()
    # Leadership lost: exit non-zero so the pod restarts and stands for election again.
    return 1 if holder is not None and stop.is_set() else 0


def main() -> int:
    config = OperatorConfig.from_env()
    return_large_buffers_to_the_system()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    return asyncio.run(run(config))


if __name__ == "__main__":
    sys.exit(main())
