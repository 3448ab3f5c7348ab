"""etcd flags that spec.etcd.extraArgs may not set, grouped by why. Pure.

The CRD carries one CEL rule per group (`cel_rule`, with the group's message) and the
operator checks the same groups at runtime, for objects stored before a rule existed.
The flag lists were read from etcd v3.5 and v3.6 (server/etcdmain/help.go, embed/config.go).
Keys may be written with or without leading dashes; they are matched without them.
"""

from __future__ import annotations

import dataclasses
import re

# What a key must look like: an etcd flag name, optionally with one or two dashes.
FLAG_KEY_PATTERN = "^-{0,2}[a-z0-9][a-z0-9-]*$"
FLAG_KEY_MESSAGE = (
    "spec.etcd.extraArgs keys must be etcd flag names: lower-case letters, digits and dashes, "
    "with or without leading dashes (e.g. max-request-bytes or --max-request-bytes), no '='"
)


@dataclasses.dataclass(frozen=True)
class FlagGroup:
    pattern: str  # regex over the flag name without leading dashes, matched whole
    message: str  # what the API server prints when a key of this group is set

    def matches(self, flag: str) -> bool:
        return re.fullmatch(self.pattern, flag.lstrip("-")) is not None

    @property
    def cel_rule(self) -> str:
        return f"!self.exists(k, k.matches('^-*({self.pattern})$'))"


_PREFIX = "spec.etcd.extraArgs must not set "

GROUPS = (
    FlagGroup(
        "name|data-dir|wal-dir|initial-cluster(-.+)?|force-new-cluster|discovery(-.+)?|config-file",
        _PREFIX + "name, data-dir, wal-dir, initial-cluster*, force-new-cluster, discovery* or config-file: "
        "the operator sets each member's identity, data directory and bootstrap "
        "(a config file would replace all of its flags)",
    ),
    FlagGroup(
        "(listen|advertise|initial-advertise)-.+",
        _PREFIX + "listen-* or advertise-* URLs: the operator sets the addresses members, clients and probes use",
    ),
    FlagGroup(
        "auto-tls|peer-auto-tls|(peer-)?(client-)?(cert|key|trusted-ca|crl)-file|(peer-)?client-cert-auth"
        "|(peer|client)-cert-allowed-(cn|hostname)|(experimental-)?peer-skip-client-san-verification"
        "|self-signed-cert-validity|cipher-suites|tls-(min|max)-version",
        _PREFIX + "TLS flags (auto-tls, peer-auto-tls, *-cert-file, *-key-file, *trusted-ca-file, *-crl-file, "
        "client-cert-auth, ...): TLS belongs to the operator (spec.tls), which sets the URLs and certificates "
        "and must reach every member",
    ),
    FlagGroup(
        "unsafe-.+|strict-reconfig-check|max-learners",
        _PREFIX + "unsafe-*, strict-reconfig-check or max-learners: they switch off etcd's own safety checks "
        "(fsync, quorum-safe reconfiguration, one learner at a time) that the operator relies on",
    ),
    FlagGroup(
        "quota-backend-bytes|auto-compaction-mode|auto-compaction-retention|heartbeat-interval|election-timeout"
        "|snapshot-count",
        _PREFIX + "quota-backend-bytes, auto-compaction-*, heartbeat-interval, election-timeout or snapshot-count: "
        "use the spec.etcd fields (quotaBackendBytes, autoCompactionMode, autoCompactionRetention, "
        "heartbeatIntervalMillis, electionTimeoutMillis, snapshotCount)",
    ),
    FlagGroup(
        "enable-v2|experimental-enable-v2v3|proxy(-.+)?",
        _PREFIX + "enable-v2, experimental-enable-v2v3 or proxy*: data written through etcd's v2 API is not in "
        "v3 snapshots, so backups would miss it, and a proxy is not a member",
    ),
    FlagGroup("version|help|h", _PREFIX + "version or help: etcd would print and exit instead of serving"),
)


@dataclasses.dataclass(frozen=True)
class DeniedFlags:
    """Supports `flag in DENIED_FLAGS` (a key with or without dashes)."""

    groups: tuple[FlagGroup, ...]

    def __contains__(self, flag: object) -> bool:
        return isinstance(flag, str) and self.reason(flag) is not None

    def reason(self, flag: str) -> str | None:
        """Why `flag` is refused, or None when etcd may be given it."""
        if re.fullmatch(FLAG_KEY_PATTERN, flag) is None:
            return FLAG_KEY_MESSAGE
        return next((g.message for g in self.groups if g.matches(flag)), None)


DENIED_FLAGS = DeniedFlags(GROUPS)
