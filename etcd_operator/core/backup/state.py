"""What the backup planner reads: the spec's schedule, the run state the operator recorded
in status, and the object's own metadata. Pure."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

from etcd_operator.core.backup.backoff import DEFAULT_BACKOFF_LIMIT
from etcd_operator.core.backup.continuous import ContinuousRecord, ContinuousSpec, StreamView
from etcd_operator.core.backup.scratch_pod import CHECK_CONTAINER
from etcd_operator.core.prerequisites import ClusterReadiness, Wait, cluster_wait, secrets_wait
from etcd_operator.core.timefmt import parse_utc


@dataclasses.dataclass(frozen=True)
class VerificationPolicy:
    enabled: bool = False
    every_n: int = 1
    schedule: str | None = None  # set: verify on this schedule instead of every N backups

    @classmethod
    def from_dict(cls, verification: Mapping[str, Any], scheduled: bool) -> VerificationPolicy:
        return cls(
            bool(verification.get("enabled", scheduled)),
            max(int(verification.get("everyN", 1)), 1),
            verification.get("schedule") or None,
        )


@dataclasses.dataclass(frozen=True)
class ScheduleSpec:
    schedule: str | None  # None: a one-shot backup
    suspend: bool = False
    verification: VerificationPolicy = VerificationPolicy()
    backoff_limit: int = DEFAULT_BACKOFF_LIMIT  # retries of a slot after a failure that may pass
    continuous: ContinuousSpec | None = None  # spec.continuous, when enabled

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> ScheduleSpec:
        schedule = spec.get("schedule") or None
        limit = spec.get("backoffLimit")
        return cls(
            schedule,
            bool(spec.get("suspend")),
            VerificationPolicy.from_dict(spec.get("verification") or {}, scheduled=schedule is not None),
            DEFAULT_BACKOFF_LIMIT if limit is None else max(int(limit), 0),
            ContinuousSpec.from_dict(spec),
        )


@dataclasses.dataclass(frozen=True)
class RecordedScratchPod:
    """The scratch pod an attempt created, as recorded in status (verification.pod)."""

    name: str
    uid: str


@dataclasses.dataclass(frozen=True)
class RunningAttempt:
    """The verification attempt in progress: its recorded start, and its scratch pod once
    created."""

    start_time: datetime.datetime
    pod: RecordedScratchPod | None = None


@dataclasses.dataclass(frozen=True)
class VerificationAttempts:
    """status.verification: the attempts at verifying one backup key that have not given a
    verdict yet. While an attempt runs, its start time and (once created) its scratch pod are
    recorded; after an attempt ended without a verdict, why, and when the next one is due
    (none after the last attempt)."""

    key: str
    attempts: int = 0  # attempts started for this key
    running: RunningAttempt | None = None  # the attempt in progress, if any
    next_attempt: datetime.datetime | None = None  # after an incomplete attempt
    reason: str = ""  # why the last attempt gave no verdict
    message: str = ""

    @property
    def in_progress(self) -> bool:
        return self.running is not None

    @classmethod
    def from_dict(cls, record: Mapping[str, Any] | None) -> VerificationAttempts | None:
        if not record or not record.get("key"):
            return None
        start_time = parse_utc(record.get("startTime"))
        pod = record.get("pod") or {}
        # The operator records the pod's name and uid together; the uid identifies it.
        recorded = RecordedScratchPod(pod.get("name") or "", pod["uid"]) if pod.get("uid") is not None else None
        return cls(
            key=record["key"],
            attempts=int(record.get("attempts") or 0),
            running=RunningAttempt(start_time, recorded) if start_time is not None else None,
            next_attempt=parse_utc(record.get("nextAttemptTime")),
            reason=record.get("reason") or "",
            message=record.get("message") or "",
        )


@dataclasses.dataclass(frozen=True)
class PendingRetry:
    """A slot whose last attempt failed for a cause that may pass, and when it is tried again."""

    slot: str
    at: datetime.datetime


@dataclasses.dataclass(frozen=True)
class LastBackup:
    """status.lastBackup: the newest full snapshot."""

    key: str
    revision: int
    cluster_id: str
    auth_revision: int | None = None  # etcd's auth revision read before it; None: not recorded

    @classmethod
    def from_dict(cls, record: Mapping[str, Any] | None) -> LastBackup | None:
        if not record or not record.get("key") or record.get("revision") is None:
            return None
        auth = record.get("authRevision")
        return cls(
            record["key"], int(record["revision"]), record.get("clusterID") or "", None if auth is None else int(auth)
        )


@dataclasses.dataclass(frozen=True)
class RunState:
    phase: str | None = None
    slot_in_progress: str | None = None  # recorded before its run started, cleared when it ends
    last_slot: datetime.datetime | None = None  # the cron slot last started
    observed_generation: int | None = None
    last_backup_key: str | None = None
    last_verification_key: str | None = None  # the backup last compared (a verdict, or inconclusive)
    backups_since_verification: int = 0
    last_verification_slot: datetime.datetime | None = None
    verification: VerificationAttempts | None = None  # attempts without a verdict yet
    recent_keys: frozenset[str] = frozenset()  # the backups status still lists
    attempts: int = 0  # attempts started for the current slot
    retry: PendingRetry | None = None  # a failed slot waiting for its next attempt
    pending_uploads: tuple[Mapping[str, str], ...] = ()  # {key, uploadId} not known finished or aborted
    cluster_id_history: tuple[str, ...] = ()  # status.clusterIDHistory (retention.py)
    last_backup: LastBackup | None = None  # the newest full snapshot: a continuous backup's base
    continuous: ContinuousRecord = ContinuousRecord()

    @classmethod
    def from_dict(cls, status: Mapping[str, Any]) -> RunState:
        retry_at = parse_utc(status.get("nextAttemptTime"))
        retry_slot = (status.get("lastFailure") or {}).get("slot")
        return cls(
            phase=status.get("phase"),
            slot_in_progress=(status.get("progress") or {}).get("slot"),
            last_slot=parse_utc(status.get("lastScheduleTime")),
            observed_generation=status.get("observedGeneration"),
            last_backup_key=(status.get("lastBackup") or {}).get("key"),
            last_verification_key=(status.get("lastVerification") or {}).get("key"),
            backups_since_verification=int(status.get("backupsSinceVerification") or 0),
            last_verification_slot=parse_utc(status.get("lastVerificationSlot")),
            verification=VerificationAttempts.from_dict(status.get("verification")),
            recent_keys=frozenset(r["key"] for r in status.get("recentBackups") or [] if r.get("key")),
            attempts=int(status.get("attempts") or 0),
            retry=PendingRetry(retry_slot, retry_at) if retry_slot and retry_at else None,
            pending_uploads=tuple(dict(u) for u in status.get("pendingUploads") or ()),
            cluster_id_history=tuple(status.get("clusterIDHistory") or ()),
            last_backup=LastBackup.from_dict(status.get("lastBackup")),
            continuous=ContinuousRecord.from_dict(status.get("continuous")),
        )


@dataclasses.dataclass(frozen=True)
class InitFailure:
    container: str
    exit_code: int | None
    message: str


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """The scratch pod's check container ended: its exit code is the verdict
    (verdict.check_verdict), its termination message the words for people."""

    exit_code: int | None
    message: str


@dataclasses.dataclass(frozen=True)
class ScratchPod:
    """The verification pod as the API server has it."""

    name: str
    uid: str
    owned: bool  # an owner reference to this EtcdBackup (by uid)
    phase: str = ""
    check: CheckResult | None = None  # the check container ended
    init_failure: InitFailure | None = None
    message: str = ""  # what it is doing, for people

    @classmethod
    def from_pod(cls, pod: Mapping[str, Any], backup_uid: str) -> ScratchPod:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        owned = any(ref.get("uid") == backup_uid for ref in meta.get("ownerReferences") or [])
        failure, waiting_on = None, ""
        for container in status.get("initContainerStatuses") or []:
            state = container.get("state") or {}
            done = state.get("terminated") or {}
            if done and done.get("exitCode") not in (None, 0) and failure is None:
                failure = InitFailure(
                    container.get("name", ""), done.get("exitCode"), (done.get("message") or "").strip()[-300:]
                )
            if not waiting_on and not done:
                waiting_on = f"init container {container.get('name')}"
        check = None
        for container in status.get("containerStatuses") or []:
            done = (container.get("state") or {}).get("terminated") or {}
            if container.get("name") == CHECK_CONTAINER and done:
                check = CheckResult(done.get("exitCode"), (done.get("message") or "").strip()[-300:])
        phase = status.get("phase") or ""
        message = status.get("message") or f"phase {phase or 'unknown'}, {waiting_on or 'the check is running'}"
        return cls(
            name=meta.get("name", ""),
            uid=meta.get("uid", ""),
            owned=owned,
            phase=phase,
            check=check,
            init_failure=failure,
            message=message,
        )


@dataclasses.dataclass(frozen=True)
class Prerequisites:
    """What a run needs, as observed in this pass: the EtcdCluster (None: it does not exist)
    and the Secrets spec.storage.s3 names that do not exist."""

    namespace: str
    cluster_name: str
    cluster: ClusterReadiness | None
    missing_secrets: tuple[str, ...] = ()

    def wait(self) -> Wait | None:
        """What a run must wait for, or None when it can start."""
        what = "the backup"
        return cluster_wait(self.namespace, self.cluster_name, self.cluster, what) or secrets_wait(
            self.namespace, self.missing_secrets, what
        )


@dataclasses.dataclass(frozen=True)
class Observed:
    created: datetime.datetime
    generation: int | None
    # The pod named for this backup's verification; looked at only while one is recorded in
    # progress (scratch_pod_observed), None when there is no such pod.
    scratch_pod: ScratchPod | None = None
    scratch_pod_observed: bool = False
    deleting: bool = False  # the object has a deletionTimestamp: nothing is started for it
    # None: not looked at (a test of something else); the controller always looks.
    prerequisites: Prerequisites | None = None
    credentials_refusal: str | None = None  # why storage.s3 may not be used here (storage_policy.py)
    stream: StreamView | None = None  # this backup's continuous writer in this process; None: none runs

    @classmethod
    def from_metadata(cls, meta: Mapping[str, Any]) -> Observed:
        created = parse_utc(meta["creationTimestamp"])
        if created is None:  # the API server sets it on every object
            raise ValueError(f"{meta.get('name')}: metadata.creationTimestamp is empty")
        return cls(created, meta.get("generation"), deleting=bool(meta.get("deletionTimestamp")))
