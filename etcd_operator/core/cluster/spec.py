"""The EtcdCluster spec as typed values, with the defaults the CRD also declares."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from etcd_operator.core import versions
from etcd_operator.core.denied_flags import DENIED_FLAGS
from etcd_operator.core.durations import parse_duration

DEFAULT_REPOSITORY = "gcr.io/etcd-development/etcd"
DEFAULT_VERSION = "3.6.16"
DEFAULT_STORAGE_SIZE = "2Gi"
SUPPORTED_MINORS = ((3, 5), (3, 6))

# Flags spec.etcd.extraArgs may not set (`flag in MANAGED_FLAGS`); the CRD refuses the same
# groups with CEL, this catches objects stored before a rule existed.
MANAGED_FLAGS = DENIED_FLAGS


@dataclasses.dataclass(frozen=True)
class Storage:
    size: str
    storage_class: str | None
    empty_dir: bool
    empty_dir_medium: str = ""
    empty_dir_size_limit: str | None = None


@dataclasses.dataclass(frozen=True)
class EtcdOptions:
    quota_backend_bytes: int | None
    auto_compaction_mode: str
    auto_compaction_retention: str
    heartbeat_interval_ms: int | None
    election_timeout_ms: int | None
    snapshot_count: int | None
    extra_args: tuple[tuple[str, str], ...]


@dataclasses.dataclass(frozen=True)
class Recovery:
    member_unhealthy_timeout: float
    quorum_loss_timeout: float
    automatic_quorum_recovery: bool


@dataclasses.dataclass(frozen=True)
class Adoption:
    """spec.adoption: a running etcd cluster this one joins and takes over (cluster/adoption.py)."""

    endpoints: tuple[str, ...]  # the foreign members' client URLs, as the user wrote them
    remove_foreign_members: bool = False
    # spec.adoption.clusterID: the ID the cluster behind the endpoints must answer with (hex,
    # as etcdctl prints it); None when unset or not hex (the CRD requires it: older objects).
    cluster_id: int | None = None

    @property
    def dial_endpoints(self) -> tuple[str, ...]:
        """host:port of each endpoint, as the operator's etcd clients dial them."""
        return tuple(e.split("://", 1)[-1].rstrip("/") for e in self.endpoints)

    @classmethod
    def from_dict(cls, adoption: Mapping[str, Any] | None) -> Adoption | None:
        if not adoption:
            return None
        return cls(
            tuple(adoption.get("endpoints") or ()),
            bool(adoption.get("removeForeignMembers", False)),
            _hex_id(adoption.get("clusterID")),
        )


def _hex_id(text: Any) -> int | None:
    try:
        return int(str(text), 16) if text else None
    except ValueError:
        return None


@dataclasses.dataclass(frozen=True)
class Hibernation:
    """spec.hibernation: every member pod stops, its data kept on its PVC (core/hibernation.py)."""

    enabled: bool = False
    # How long the members wait, once asked to sleep, for the backups' snapshot before they
    # stop without it (measured on the operator's own clock).
    snapshot_timeout: float = 15 * 60.0


@dataclasses.dataclass(frozen=True)
class Defragmentation:
    enabled: bool
    min_fragmented_ratio: float
    min_fragmented_bytes: int
    # Automatic (threshold) defragmentation only inside a daily UTC window starting at
    # window_start ("HH:MM") and lasting window_seconds; None: at any time.
    window_start: str | None = None
    window_seconds: float = 0.0


@dataclasses.dataclass(frozen=True)
class SpaceRecovery:
    """NOSPACE remediation: compaction keeps this many revisions before the current one."""

    retain_revisions: int = 100


ISSUER_MANAGED = "Managed"
ISSUER_SECRETS = "Secrets"


@dataclasses.dataclass(frozen=True)
class TLSOptions:
    """spec.tls. A spec without a tls block is plaintext: the API server defaults every stored
    object to enabled, so only hand-built specs (unit tests, the simulator) lack it."""

    enabled: bool = False
    issuer: str = ISSUER_MANAGED
    member_secret: str | None = None
    operator_secret: str | None = None
    certificate_lifetime: float = 90 * 24 * 3600.0
    renew_at_fraction: float = 0.66
    ca_lifetime: float = 10 * 365 * 24 * 3600.0
    # Not from the user: fingerprints of the CAs in the members' trust bundle, set on the
    # acting spec so that members restart (one at a time) when the bundle changes.
    trusted: tuple[str, ...] = ()
    # Not from the user either: the CN the members' peer port accepts (status.tls.peerIdentity),
    # set on the acting spec once every member serves a certificate with it (tls_plan).
    peer_common_name: str | None = None

    @classmethod
    def from_dict(cls, tls: Mapping[str, Any] | None) -> TLSOptions:
        if tls is None:
            return cls()
        return cls(
            enabled=bool(tls.get("enabled", True)),
            issuer=tls.get("issuer") or ISSUER_MANAGED,
            member_secret=tls.get("memberSecretName"),
            operator_secret=tls.get("operatorSecretName"),
            certificate_lifetime=parse_duration(tls.get("certificateLifetime", "2160h")),
            renew_at_fraction=float(tls.get("renewAtFraction", 0.66)),
            ca_lifetime=parse_duration(tls.get("caLifetime", "87600h")),
        )


ACCESS_READ = "Read"
ACCESS_WRITE = "Write"
ACCESS_READ_WRITE = "ReadWrite"


@dataclasses.dataclass(frozen=True, order=True)
class KeyPermission:
    """One key permission of a role: an exact key, or every key under a prefix."""

    key: str
    prefix: bool
    access: str  # ACCESS_READ, ACCESS_WRITE or ACCESS_READ_WRITE


@dataclasses.dataclass(frozen=True)
class RoleSpec:
    name: str
    permissions: tuple[KeyPermission, ...] = ()


@dataclasses.dataclass(frozen=True)
class SecretKeyRef:
    name: str
    key: str = "password"

    @classmethod
    def from_dict(cls, ref: Mapping[str, Any] | None) -> SecretKeyRef | None:
        return cls(ref["name"], ref.get("key") or "password") if ref else None


@dataclasses.dataclass(frozen=True)
class UserSpec:
    name: str
    roles: tuple[str, ...] = ()
    certificate: bool = False  # the operator issues a client certificate with CN = name
    password: SecretKeyRef | None = None


DEFAULT_USER_CERTIFICATE_LIFETIME = "24h"
USER_CERTIFICATE_LIFETIME = 24 * 3600.0


@dataclasses.dataclass(frozen=True)
class AuthOptions:
    """spec.auth. `declared` is False when the spec has no auth block: the operator then
    leaves etcd's users, roles and auth switch as they are. `enabled` None (not set): the
    users and roles are kept, the switch is left as found; only an explicit false turns it off."""

    declared: bool = False
    enabled: bool | None = None
    roles: tuple[RoleSpec, ...] = ()
    users: tuple[UserSpec, ...] = ()
    # Users' client certificates live this long: the longest a certificate of a user who no
    # longer asks for one, or of a removed name, can authenticate (docs/operations/authentication.md).
    certificate_lifetime: float = USER_CERTIFICATE_LIFETIME

    @classmethod
    def from_dict(cls, auth: Mapping[str, Any] | None) -> AuthOptions:
        if auth is None:
            return cls()
        roles = tuple(
            RoleSpec(
                r["name"],
                tuple(
                    sorted(
                        KeyPermission(p["key"], bool(p.get("prefix", False)), p.get("access", ACCESS_READ_WRITE))
                        for p in r.get("permissions") or ()
                    )
                ),
            )
            for r in auth.get("roles") or ()
        )
        users = tuple(
            UserSpec(
                u["name"],
                tuple(sorted(set(u.get("roles") or ()))),
                bool(u.get("certificate", False)),
                SecretKeyRef.from_dict(u.get("passwordSecretRef")),
            )
            for u in auth.get("users") or ()
        )
        enabled = auth.get("enabled")
        lifetime = parse_duration(auth.get("certificateLifetime") or DEFAULT_USER_CERTIFICATE_LIFETIME)
        return cls(True, None if enabled is None else bool(enabled), roles, users, lifetime)


@dataclasses.dataclass(frozen=True)
class ClusterSpec:
    size: int
    version: str
    repository: str
    storage: Storage
    reclaim_policy: str
    paused: bool
    pod: Mapping[str, Any]
    etcd: EtcdOptions
    recovery: Recovery
    defrag: Defragmentation
    tls: TLSOptions = TLSOptions()
    space_recovery: SpaceRecovery = SpaceRecovery()
    hibernation: Hibernation = Hibernation()
    adoption: Adoption | None = None
    auth: AuthOptions = AuthOptions()

    @property
    def image(self) -> str:
        return f"{self.repository}:v{self.version}"

    @property
    def minor(self) -> str:
        major, minor, _ = versions.parse(self.version)
        return f"{major}.{minor}"

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> ClusterSpec:
        storage = spec.get("storage") or {}
        empty_dir = storage.get("emptyDir")
        etcd = spec.get("etcd") or {}
        recovery = spec.get("recovery") or {}
        defrag = (spec.get("maintenance") or {}).get("defragmentation") or {}
        defrag_window = defrag.get("window") or {}
        space_recovery = (spec.get("maintenance") or {}).get("spaceRecovery") or {}
        hibernation = spec.get("hibernation") or {}
        return cls(
            size=int(spec.get("size", 3)),
            version=str(spec.get("version", DEFAULT_VERSION)),
            repository=spec.get("repository") or DEFAULT_REPOSITORY,
            storage=Storage(
                size=str(storage.get("size") or DEFAULT_STORAGE_SIZE),
                storage_class=storage.get("storageClassName"),
                empty_dir=empty_dir is not None,
                empty_dir_medium=(empty_dir or {}).get("medium", ""),
                empty_dir_size_limit=(empty_dir or {}).get("sizeLimit"),
            ),
            reclaim_policy=spec.get("reclaimPolicy", "Retain"),
            paused=bool(spec.get("paused", False)),
            pod=spec.get("pod") or {},
            etcd=EtcdOptions(
                quota_backend_bytes=etcd.get("quotaBackendBytes"),
                auto_compaction_mode=etcd.get("autoCompactionMode", "periodic"),
                auto_compaction_retention=str(etcd.get("autoCompactionRetention", "1h")),
                heartbeat_interval_ms=etcd.get("heartbeatIntervalMillis"),
                election_timeout_ms=etcd.get("electionTimeoutMillis"),
                snapshot_count=etcd.get("snapshotCount"),
                extra_args=tuple(sorted((etcd.get("extraArgs") or {}).items())),
            ),
            recovery=Recovery(
                member_unhealthy_timeout=parse_duration(recovery.get("memberUnhealthyTimeout", "3m")),
                quorum_loss_timeout=parse_duration(recovery.get("quorumLossTimeout", "2m")),
                automatic_quorum_recovery=bool(recovery.get("automaticQuorumRecovery", False)),
            ),
            defrag=Defragmentation(
                enabled=bool(defrag.get("enabled", True)),
                min_fragmented_ratio=float(defrag.get("minFragmentedRatio", 0.5)),
                min_fragmented_bytes=int(defrag.get("minFragmentedBytes", 64 * 1024 * 1024)),
                window_start=defrag_window.get("start"),
                window_seconds=parse_duration(defrag_window.get("duration") or "0s"),
            ),
            space_recovery=SpaceRecovery(
                retain_revisions=int(space_recovery.get("retainRevisions", SpaceRecovery.retain_revisions)),
            ),
            tls=TLSOptions.from_dict(spec.get("tls")),
            hibernation=Hibernation(
                enabled=bool(hibernation.get("enabled", False)),
                snapshot_timeout=parse_duration(hibernation.get("snapshotTimeout") or "15m"),
            ),
            adoption=Adoption.from_dict(spec.get("adoption")),
            auth=AuthOptions.from_dict(spec.get("auth")),
        )


@dataclasses.dataclass(frozen=True)
class SpecProblem:
    """A spec the schema accepted but the operator will not act on."""

    reason: str
    message: str


def spec_problems(spec: ClusterSpec) -> list[SpecProblem]:
    """Problems visible from the spec alone (no observed state needed)."""
    problems = []
    if versions.parse(spec.version)[:2] not in SUPPORTED_MINORS:
        problems.append(SpecProblem("UnsupportedVersion", f"etcd {spec.version} is not supported; use 3.5.x or 3.6.x"))
    # The same test builders.allowed_extra_args uses to drop them.
    refused = {
        k: reason for k, _ in spec.etcd.extra_args if (reason := MANAGED_FLAGS.reason(k.lstrip("-"))) is not None
    }
    if refused:
        reasons = " ".join(dict.fromkeys(refused[k] for k in sorted(refused)))
        problems.append(SpecProblem("ManagedFlag", f"refused extraArgs {', '.join(sorted(refused))}. {reasons}"))
    if spec.hibernation.enabled and spec.storage.empty_dir:
        problems.append(SpecProblem("HibernationRefused", HIBERNATION_ON_EMPTY_DIR))
    return problems


# The CRD refuses the same with CEL; this catches objects stored before the rule existed.
HIBERNATION_ON_EMPTY_DIR = (
    "spec.hibernation cannot be enabled on emptyDir storage: stopping the member pods would "
    "delete every member's data. Use PVC storage (spec.storage.size) for a cluster that hibernates"
)


def version_change_problem(running: str | None, wanted: str) -> SpecProblem | None:
    """A version change etcd cannot make safely: a downgrade or a skipped minor."""
    if not running:
        return None
    have, want = versions.parse(running), versions.parse(wanted)
    if want < have:
        return SpecProblem(
            "VersionDowngrade",
            f"spec.version {wanted} is older than the running {running}; etcd does not support "
            f"downgrades this way. Set spec.version back to {running} or newer",
        )
    if want[:2] > have[:2] and (want[0] != have[0] or want[1] - have[1] > 1):
        return SpecProblem(
            "MinorVersionSkip",
            f"spec.version {wanted} skips a minor version from the running {running}; "
            f"upgrade one minor version at a time",
        )
    return None
