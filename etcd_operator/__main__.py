"""Entry point: `python -m etcd_operator` runs kopf with the project's settings."""

from __future__ import annotations

import logging
import sys

import kopf

from etcd_operator.config import OperatorConfig


def main() -> int:
    config = OperatorConfig.from_env()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    import etcd_operator.operator  # noqa: F401  registers the handlers

    kopf.run(
        clusterwide=config.clusterwide,
        namespaces=list(config.namespaces),
        liveness_endpoint=f"http://0.0.0.0:{config.health_port}/healthz",
        standalone=config.peering_name is None,
        peering_name=config.peering_name,
        priority=config.priority,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
