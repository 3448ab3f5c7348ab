"""Operator-wide settings, read once from the environment at start-up."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import socket
import uuid
from collections.abc import Mapping

from etcd_operator import DEFAULT_OPERATOR_IMAGE
from etcd_operator.clients.kube.informer import is_pattern
from etcd_operator.core.buffer_budget import DEFAULT_LIMIT_BYTES
from etcd_operator.core.cluster.naming import DEFAULT_CLUSTER_DOMAIN
from etcd_operator.core.leadership_fence import LeaseTiming
from etcd_operator.core.shard import Shard, shard_from_settings
from etcd_operator.core.storage_policy import StoragePolicy

LOG_FORMATS = ("plain", "json")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


@dataclasses.dataclass(frozen=True)
class OperatorConfig:
    namespaces: tuple[str, ...]
    health_port: int  # /healthz, /readyz and the operator's own /metrics
    log_format: str  # LOG_FORMAT: "plain" or "json" (runtime/logs.py)
    operator_image: str
    leader_election: bool
    lease_namespace: str
    identity: str  # unique per process: a restarted container is a new candidate
    lease_timing: LeaseTiming = LeaseTiming()
    log_writes: bool = False
    log_level: str = "INFO"
    health_address: str = "0.0.0.0"
    memory_budget_bytes: int = DEFAULT_LIMIT_BYTES  # all backups' part buffers together
    shard: Shard = Shard()  # SHARD_NAME, SHARD_SELECTOR: the objects this instance works on
    # Watch-driven reconciliation (docs/concepts.md, "Watch-driven reconciliation").
    watch_children: bool = True  # pods and PVCs through operator-wide watches; false: every pass lists them
    steady_poll_seconds: float = 15.0  # a steady cluster's members are asked for their status this often
    steady_poll_max_seconds: float = 60.0  # ... backing off to this while its status stays unchanged
    resync_seconds: float = 600.0  # a full live pass per cluster about this often (jittered per cluster)
    member_metrics_interval_seconds: float = 30.0  # each cluster's members' /metrics, for anomaly detection
    # AMBIENT_CREDENTIALS_NAMESPACES, ORPHANED_UPLOAD_GRACE_SECONDS (storage_policy.py)
    storage_policy: StoragePolicy = StoragePolicy()
    # CLUSTER_DOMAIN: the Kubernetes cluster's DNS domain, in the members' certificate names
    # (etcd checks a peer's certificate against the name its address resolves back to).
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN
    # ADOPTION_ALLOW_CROSS_NAMESPACE: spec.adoption.endpoints may name Services or pods of
    # another namespace (cluster/adoption.py); off, an adoption stays within its namespace.
    adoption_cross_namespace: bool = False

    @property
    def clusterwide(self) -> bool:
        return not self.namespaces

    @property
    def names_only(self) -> bool:
        """WATCH_NAMESPACES names namespaces, with no glob: kopf then watches exactly these,
        without scanning namespaces. Its scanning drops a namespace as soon as it is marked
        for deletion, before the objects in it are gone, and their finalizers would never be
        released: the namespace would stay Terminating (a known limit of globs)."""
        return bool(self.namespaces) and not any(is_pattern(n) for n in self.namespaces)

    @classmethod
    def from_env(cls, environment: Mapping[str, str] | None = None) -> OperatorConfig:
        env = os.environ if environment is None else environment
        namespaces = tuple(n for n in env.get("WATCH_NAMESPACES", "").split(",") if n.strip())
        return cls(
            namespaces=tuple(n.strip() for n in namespaces),
            health_port=int(env.get("HEALTH_PORT", "8080")),
            log_format=choice_setting(env, "LOG_FORMAT", "plain", LOG_FORMATS),
            operator_image=env.get("OPERATOR_IMAGE", DEFAULT_OPERATOR_IMAGE),
            leader_election=env.get("LEADER_ELECTION", "false").lower() == "true",
            lease_namespace=env.get("POD_NAMESPACE") or _service_account_namespace() or "default",
            identity=f"{env.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}",
            lease_timing=LeaseTiming(
                lease_seconds=float(env.get("LEASE_DURATION_SECONDS", "15")),
                renew_every=float(env.get("LEASE_RENEW_SECONDS", "2")),
                stop_acting_seconds=float(env.get("LEASE_STOP_ACTING_SECONDS", "12")),
            ),
            log_writes=env.get("LOG_WRITES", "false").lower() == "true",
            log_level=choice_setting(env, "LOG_LEVEL", "INFO", LOG_LEVELS),
            health_address=env.get("HEALTH_ADDRESS") or "0.0.0.0",
            memory_budget_bytes=int(env.get("MEMORY_BUDGET_BYTES") or DEFAULT_LIMIT_BYTES),
            shard=shard_from_settings(env.get("SHARD_NAME", ""), env.get("SHARD_SELECTOR", "")),
            watch_children=env.get("WATCH_CHILDREN", "true").lower() != "false",
            steady_poll_seconds=float(env.get("STEADY_POLL_SECONDS") or 15.0),
            steady_poll_max_seconds=float(env.get("STEADY_POLL_MAX_SECONDS") or 60.0),
            resync_seconds=float(env.get("RESYNC_SECONDS") or 600.0),
            member_metrics_interval_seconds=float(env.get("MEMBER_METRICS_INTERVAL_SECONDS") or 30.0),
            storage_policy=StoragePolicy.from_settings(
                env.get("AMBIENT_CREDENTIALS_NAMESPACES", ""), env.get("ORPHANED_UPLOAD_GRACE_SECONDS", "")
            ),
            cluster_domain=cluster_domain_setting(env.get("CLUSTER_DOMAIN", "")),
            adoption_cross_namespace=env.get("ADOPTION_ALLOW_CROSS_NAMESPACE", "false").lower() == "true",
        )


def choice_setting(env: Mapping[str, str], variable: str, default: str, choices: tuple[str, ...]) -> str:
    """One of `choices` (case-insensitive); empty or unset: `default`."""
    value = (env.get(variable) or default).strip()
    for choice in choices:
        if value.lower() == choice.lower():
            return choice
    raise ValueError(f"{variable} {value!r} is none of {', '.join(choices)}")


_DOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def cluster_domain_setting(value: str) -> str:
    """CLUSTER_DOMAIN, without a trailing dot; empty: cluster.local."""
    domain = value.strip().rstrip(".").lower() or DEFAULT_CLUSTER_DOMAIN
    if len(domain) > 253 or not _DOMAIN.match(domain):
        raise ValueError(f"CLUSTER_DOMAIN {value!r} is not a DNS domain (e.g. cluster.local)")
    return domain


def _service_account_namespace() -> str | None:
    path = pathlib.Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
    return path.read_text().strip() if path.exists() else None
