"""What an EtcdCluster's status records from earlier passes, read back at the start of a
pass: its identity, a multi-pass operation, the last good roll, the quota, space and
defragmentation progress, learner join failures. Plain data; parsed from status, pure."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import Any

from etcd_operator.core.cluster.adoption_record import AdoptionRecord
from etcd_operator.core.cluster.identity import parse_hex_id
from etcd_operator.core.cluster.spec import ClusterSpec
from etcd_operator.core.hibernation import HibernationRecord
from etcd_operator.core.timefmt import format_time, parse_time


@dataclasses.dataclass(frozen=True)
class Operation:
    """A multi-pass operation recorded in status before it starts (quorum recovery)."""

    kind: str
    member: str
    member_id: int
    started_at: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "member": self.member,
            "memberID": f"{self.member_id:x}",
            "startedAt": self.started_at,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Operation | None:
        if not data or not data.get("kind"):
            return None
        return cls(data["kind"], data["member"], int(data["memberID"], 16), float(data["startedAt"]))


@dataclasses.dataclass(frozen=True)
class RollRecord:
    """status.rollout: the last pod spec every member ran healthily, and a failed roll."""

    last_good_spec: Mapping[str, Any] | None = None
    failed_hash: str | None = None
    failed_member: str = ""
    failed_reason: str = ""
    # The pod spec hash the members ran when last_good_spec was recorded: it includes what the
    # operator resolves beyond the spec (a derived quota, the trusted CAs).
    last_good_hash: str | None = None

    def to_dict(self) -> dict[str, Any]:
        # The spec is kept as one JSON string: a merge patch would merge a nested object with
        # the old one and keep fields the user has since removed. Empty strings, never null,
        # so an unchanged record compares equal to what status holds.
        return {
            "lastGoodSpec": json.dumps(self.last_good_spec, sort_keys=True) if self.last_good_spec else "",
            "failedPodSpecHash": self.failed_hash or "",
            "failedMember": self.failed_member,
            "failedReason": self.failed_reason,
            "lastGoodPodSpecHash": self.last_good_hash or "",
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> RollRecord:
        data = data or {}
        spec = data.get("lastGoodSpec")
        return cls(
            json.loads(spec) if spec else None,
            data.get("failedPodSpecHash") or None,
            data.get("failedMember") or "",
            data.get("failedReason") or "",
            data.get("lastGoodPodSpecHash") or None,
        )

    @property
    def last_good(self) -> ClusterSpec | None:
        return ClusterSpec.from_dict(self.last_good_spec) if self.last_good_spec is not None else None


@dataclasses.dataclass(frozen=True)
class SpaceRecoveryRecord:
    """NOSPACE remediation in progress (status.spaceRecovery): the revision compacted to
    (None: not yet) and the members defragmented since."""

    started_at: float
    compacted_revision: int | None = None
    defragmented: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "startedAt": self.started_at,
            "compactedRevision": self.compacted_revision,
            "defragmented": list(self.defragmented),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> SpaceRecoveryRecord | None:
        if not data or data.get("startedAt") is None:
            return None
        revision = data.get("compactedRevision")
        return cls(
            float(data["startedAt"]), None if revision is None else int(revision), tuple(data.get("defragmented") or ())
        )


@dataclasses.dataclass(frozen=True)
class DefragmentationRecord:
    """status.defragmentation: the last request token done, and the one in progress with
    the members defragmented for it so far."""

    last_token: str | None = None
    token: str | None = None
    defragmented: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"lastToken": self.last_token, "token": self.token, "defragmented": list(self.defragmented)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> DefragmentationRecord:
        data = data or {}
        return cls(data.get("lastToken"), data.get("token"), tuple(data.get("defragmented") or ()))


@dataclasses.dataclass(frozen=True)
class LeaderMoveRecord:
    """status.leaderMove: the last etcd.operator.dev/move-leader request handled, and how it
    ended (moved, led already, or refused and why)."""

    last_token: str | None = None
    outcome: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"lastToken": self.last_token, "outcome": self.outcome}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> LeaderMoveRecord:
        data = data or {}
        return cls(data.get("lastToken"), data.get("outcome"))


@dataclasses.dataclass(frozen=True)
class JoinRecord:
    """status.learnerJoins: learners removed in a row because they did not catch up."""

    failures: int = 0
    last_failure_at: float | None = None  # wall clock, when the last one was removed: for people only
    last_member_id: int | None = None  # the last one removed: a retried removal counts once
    last_reason: str = ""

    def to_dict(self) -> dict[str, Any] | None:
        if not self.failures:
            return None
        return {
            "failures": self.failures,
            "lastFailureAt": format_time(self.last_failure_at or 0.0),
            "lastMemberID": f"{self.last_member_id or 0:x}",
            "lastReason": self.last_reason,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> JoinRecord:
        if not data or not data.get("failures"):
            return cls()
        try:
            return cls(
                int(data["failures"]),
                parse_time(data.get("lastFailureAt") or ""),
                int(data.get("lastMemberID") or "0", 16),
                str(data.get("lastReason") or ""),
            )
        except (TypeError, ValueError):
            return cls()  # unreadable: no wait rather than a pass that raises


@dataclasses.dataclass(frozen=True)
class AuthRecord:
    """status.auth: the etcd users and roles this operator manages (it removes only those),
    and the resourceVersion of the password Secret each user's password was last set from
    (never the password, nor a hash of it). For certificates: until when the latest one
    issued for each declared user is valid (`issuedCertificates`), and the names removed
    while one of their certificates may still be valid (`retiredUsers`): such a name is not
    declared again before that time (cluster/auth.py)."""

    managed_users: tuple[str, ...] = ()
    managed_roles: tuple[str, ...] = ()
    password_versions: Mapping[str, str] = dataclasses.field(default_factory=dict)
    certificate_users: tuple[str, ...] = ()  # users whose certificate Secret the operator issued
    certificates_valid_until: Mapping[str, float] = dataclasses.field(default_factory=dict)
    retired_users: Mapping[str, float] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "managedUsers": sorted(self.managed_users),
            "managedRoles": sorted(self.managed_roles),
            "passwordVersions": dict(sorted(self.password_versions.items())),
            "certificateUsers": sorted(self.certificate_users),
            # Upper bounds: rounded up to the second.
            "issuedCertificates": [
                {"name": n, "validUntil": format_time(math.ceil(t))}
                for n, t in sorted(self.certificates_valid_until.items())
            ],
            "retiredUsers": [
                {"name": n, "certificateValidUntil": format_time(math.ceil(t))}
                for n, t in sorted(self.retired_users.items())
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> AuthRecord:
        data = data or {}
        versions = data.get("passwordVersions") or {}
        return cls(
            tuple(sorted(data.get("managedUsers") or ())),
            tuple(sorted(data.get("managedRoles") or ())),
            {str(k): str(v) for k, v in versions.items() if v},
            tuple(sorted(data.get("certificateUsers") or ())),
            _times(data.get("issuedCertificates"), "validUntil"),
            _times(data.get("retiredUsers"), "certificateValidUntil"),
        )


def _times(entries: Any, field: str) -> dict[str, float]:
    """A list of {name, <field>: time} as name -> Unix seconds."""
    times: dict[str, float] = {}
    for entry in entries or ():
        when = parse_time(entry.get(field)) if isinstance(entry, Mapping) else None
        if when is not None and entry.get("name"):
            times[str(entry["name"])] = when
    return times


@dataclasses.dataclass(frozen=True)
class ClusterStatus:
    """The EtcdCluster's status as the previous passes wrote it."""

    operation: Operation | None = None  # status.operation: a quorum recovery in progress
    bootstrapped: bool = False  # the cluster existed once (status.clusterID was recorded)
    recorded_cluster_id: int | None = None  # status.clusterID: answers from any other cluster are not trusted
    rollout: RollRecord = RollRecord()  # status.rollout: the last good pod spec, a failed roll
    recorded_version: str | None = None  # status.currentVersion: what ran when a member last answered
    downgrade_target: str | None = None  # status.downgrade.target: a downgrade enabled in etcd
    # status.quota.backendBytes: the quota the operator resolved last (None: etcd's default);
    # quota_recorded is False until the operator first recorded one.
    recorded_quota: int | None = None
    quota_recorded: bool = False
    space_recovery: SpaceRecoveryRecord | None = None  # status.spaceRecovery
    defragmentation: DefragmentationRecord = DefragmentationRecord()  # status.defragmentation
    leader_move: LeaderMoveRecord = LeaderMoveRecord()  # status.leaderMove
    learner_joins: JoinRecord = JoinRecord()  # status.learnerJoins: learners that did not catch up (learners.py)
    hibernation: HibernationRecord | None = None  # status.hibernation: asleep, or going to sleep or waking
    adoption: AdoptionRecord | None = None  # status.adoption: a foreign cluster being adopted (cluster/adoption.py)
    auth: AuthRecord = AuthRecord()  # status.auth: the users and roles the operator manages

    @classmethod
    def from_dict(cls, status: Mapping[str, Any]) -> ClusterStatus:
        return cls(
            operation=Operation.from_dict(status.get("operation")),
            bootstrapped=bool(status.get("clusterID")),
            recorded_cluster_id=parse_hex_id(status.get("clusterID")),
            rollout=RollRecord.from_dict(status.get("rollout")),
            recorded_version=status.get("currentVersion") or None,
            downgrade_target=(status.get("downgrade") or {}).get("target"),
            recorded_quota=(status.get("quota") or {}).get("backendBytes"),
            quota_recorded=isinstance(status.get("quota"), dict),
            space_recovery=SpaceRecoveryRecord.from_dict(status.get("spaceRecovery")),
            defragmentation=DefragmentationRecord.from_dict(status.get("defragmentation")),
            leader_move=LeaderMoveRecord.from_dict(status.get("leaderMove")),
            learner_joins=JoinRecord.from_dict(status.get("learnerJoins")),
            hibernation=HibernationRecord.from_dict(status.get("hibernation")),
            adoption=AdoptionRecord.from_dict(status.get("adoption")),
            auth=AuthRecord.from_dict(status.get("auth")),
        )


def known_version(status: ClusterStatus, running_version: str | None) -> str | None:
    """The version the members run; when none answers, the one they ran last."""
    return running_version or status.recorded_version
