"""Operator-wide settings, read once from the environment at start-up."""

from __future__ import annotations

import dataclasses
import os


@dataclasses.dataclass(frozen=True)
class OperatorConfig:
    namespaces: tuple[str, ...]
    health_port: int
    metrics_port: int
    peering_name: str | None
    priority: int
    log_format: str

    @property
    def clusterwide(self) -> bool:
        return not self.namespaces

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "OperatorConfig":
        env = os.environ if env is None else env
        namespaces = tuple(n for n in env.get("WATCH_NAMESPACES", "").split(",") if n.strip())
        return cls(
            namespaces=tuple(n.strip() for n in namespaces),
            health_port=int(env.get("HEALTH_PORT", "8080")),
            metrics_port=int(env.get("METRICS_PORT", "8081")),
            peering_name=env.get("PEERING_NAME") or None,
            priority=int(env.get("PEERING_PRIORITY", "0")),
            log_format=env.get("LOG_FORMAT", "plain"),
        )
