"""Decides the one next step for an EtcdBackup from its spec, the run state recorded in
status, and the time. Pure.

Invariants, each covered by tests/unit/test_backup_planner.py:
- a slot is recorded in status (StartSlot) before its run, and a recorded slot is finished
  (RunBackup) under the same name before any other slot starts;
- a schedule the operator refuses (invalid, never fires, too frequent) runs nothing, not
  even an interrupted slot; a suspended one starts nothing;
- no cron slot is started twice, and however many were missed, one catch-up run happens;
- a completed one-shot backup never runs again; a failed one runs again only after its
  spec changed; a schedule set later on either makes it a scheduled backup;
- a verification never interrupts a run: it comes after a recorded slot is finished and
  before the next one starts; it verifies the newest backup, once, when the policy says
  (every Nth backup, or its own schedule);
- a verification takes several passes: its attempt is recorded in status (StartVerification:
  key, attempt, start time) before its scratch pod is created, and the pod's name and uid
  are recorded by the pass that created it; an attempt in progress is carried to its end
  before anything else happens (even when suspended or the schedule is refused since), so
  its scratch pod is never left behind;
- only the recorded pod is trusted: a pod of this backup under the scratch pod's name with
  another uid is deleted (by its uid) and never compared; a pod this backup does not own is
  never touched (the attempt ends without a verdict);
- the verdict comes from the recorded pod's own status (its check container's exit code):
  the operator never connects to the scratch member, which listens on no network port;
- an attempt gives up when its pod has not finished its check within START_TIMEOUT_SECONDS
  of the recorded start, whatever the operator's restarts in between;
- a verdict (verified True or False) or an inconclusive comparison is never retried; an
  attempt that could not compare (incomplete) is retried for the same key with exponential
  backoff, at most MAX_ATTEMPTS times per key (backup/retry.py), and not after the backup
  left status; a due backup slot comes before a retry, and a newer backup the policy would
  verify comes before a retry of an older one;
- nothing is started for an EtcdBackup being deleted (no slot, no run, no scratch pod);
- nothing runs or is verified while storage.s3 names no credentials Secret and the install
  does not allow ambient credentials in the namespace (RefuseCredentials; storage_policy.py);
  a verification in progress then waits too, its scratch pod left until it may go on;
- a run that is due waits, in phase Pending and without using an attempt, while its cluster
  does not exist or has never served yet, or a Secret it reads does not exist
  (etcd_operator/core/prerequisites.py); it starts on the first pass after they are there;
- while its cluster is going to sleep (status.hibernation Snapshotting), a scheduled or
  continuous backup whose newest snapshot does not hold the revision the cluster recorded
  takes a full snapshot at once (after a recorded slot or a due retry); while the cluster's
  members stop, are stopped or wake, no run starts (ClusterHibernated);
- while the members stop (Stopping) a continuous writer keeps writing its chain, and one
  that is not running starts: members still running may acknowledge writes until fewer
  than a quorum are left, and the cluster planner stops the last of them only once the
  chain holds what they hold (core/cluster/hibernation.py). The writer stops once no
  member runs (Hibernated) or while they wake;
- a run that failed for a cause that may pass is retried under the same slot name after a
  backoff (backup/backoff.py), at most spec.backoffLimit times; each retry is recorded in
  status (RetrySlot) before it runs; a newer due cron slot replaces a retry of an older one,
  so two slots are never in flight.

A continuous backup (spec.continuous; core/backup/continuous.py), in this order:
- a writer that runs when none should (deleted, credentials refused, suspended, schedule
  refused, continuous turned off) is stopped (StopStream) before anything else is done;
- a chain the writer could not resume is recorded broken (MarkChainBroken) before anything
  else, even during a verification (recording starts nothing);
- a recorded slot is finished, and a due retry runs, before any stream step;
- without a base (no full snapshot yet, or the chain broke since the newest one), a full
  snapshot is taken at once: the stream never starts from a snapshot older than a break;
- the writer runs the recorded chain; a newer full snapshot starts a new chain only once the
  recorded one has reached that snapshot's revision (no revision left unreachable): as its
  writer says, or, with none running in this process (a restart, a failed writer), as
  status.continuous.lastRevision recorded; a restarted writer resumes the recorded chain
  after its last uploaded segment, or breaks it (RevisionCompacted) when etcd no longer has
  the revisions after it;
- a full snapshot is taken when events or bytes since the last one reach
  spec.continuous.fullSnapshotAfter, or when the schedule fires;
- a full snapshot is taken when, with the newest snapshot's chain running, the newest etcd
  auth revision read of its cluster (its writer's, or status.continuous.authRead, which
  keeps any writer's across restarts and takeovers) is newer than the one recorded with that
  snapshot: auth changes are not in the watch, so every later point then has a base with
  the auth state it had. Once a newer snapshot is taken, nothing is asked while the old
  chain runs to it; after the hand-over, a reading the old chain's writer took above the new
  snapshot's (it may have been read after that snapshot's own reading) asks once more. With
  either revision unknown nothing is asked (the restore says it cannot tell).
"""

from __future__ import annotations

import dataclasses
import datetime

from etcd_operator.core import hibernation
from etcd_operator.core.backup import retry, schedule
from etcd_operator.core.backup import steps as s
from etcd_operator.core.backup.continuous import AuthRead, ChainStart, ContinuousSpec, StreamView
from etcd_operator.core.backup.scratch_verdict import Verdict, check_verdict, init_failure_verdict
from etcd_operator.core.backup.segments import chain_id
from etcd_operator.core.backup.state import (
    LastBackup,
    Observed,
    PendingRetry,
    RunState,
    ScheduleSpec,
    ScratchPod,
    VerificationAttempts,
    VerificationPolicy,
)
from etcd_operator.core.prerequisites import CLUSTER_HIBERNATED, ClusterReadiness
from etcd_operator.core.storage_policy import AMBIENT_NOT_ALLOWED

COMPLETED = "Completed"
FAILED = "Failed"
# The Continuous condition's reasons (status.py) for a writer stopped on purpose.
STREAM_STOPPED = "Stopped"
STREAM_DISABLED = "Disabled"
WAITING_FOR_BASE = "WaitingForBaseSnapshot"
CHAIN_BROKEN = "ChainBroken"


def one_shot_slot(observed: Observed) -> str:
    return "once-" + schedule.slot_name(observed.created)


def plan(spec: ScheduleSpec, status: RunState, observed: Observed, now: float) -> s.Step:
    """`status`: the run state recorded in the object's status (RunState.from_dict); `now`:
    the wall clock in seconds since the epoch (time.time()), as the restore and cluster
    planners take it. The cron arithmetic works on it as an aware UTC datetime."""
    at = datetime.datetime.fromtimestamp(now, datetime.UTC)
    if observed.deleting:
        return _stopping(observed, s.Idle(message="the EtcdBackup is being deleted; nothing is started for it"))
    if observed.credentials_refusal:
        return _stopping(
            observed, s.RefuseCredentials(reason=AMBIENT_NOT_ALLOWED, message=observed.credentials_refusal)
        )
    if spec.continuous is None and observed.stream is not None:
        return s.StopStream(reason=STREAM_DISABLED, message="spec.continuous is not enabled; the writer stops")
    if observed.stream is not None and observed.stream.broken is not None:
        broken = observed.stream.broken
        return s.MarkChainBroken(chain_break=broken, message=f"chain {broken.chain} broke: {broken.message}")
    if status.verification is not None and status.verification.in_progress:
        return verification_in_progress(status.verification, observed, at)
    if spec.continuous is not None:
        return _plan_continuous(spec, spec.continuous, status, observed, at)
    if spec.schedule is None:
        return _plan_one_shot(spec, status, observed, at)
    return _plan_scheduled(spec, status, observed, at)


def _stopping(observed: Observed, step: s.Step) -> s.Step:
    """`step`, once no writer runs: a running one is stopped first."""
    if observed.stream is None:
        return step
    return s.StopStream(reason=STREAM_STOPPED, message=step.message)


def full_snapshot_slot(now: datetime.datetime) -> str:
    return "full-" + schedule.slot_name(now)


def _full_snapshot(observed: Observed, now: datetime.datetime, why: str, base_for: str | None = None) -> s.Step:
    slot = full_snapshot_slot(now)
    return when_ready(
        s.StartSlot(
            slot=slot,
            slot_time=None,
            next_slot=None,
            one_shot=False,
            base_for=base_for,
            message=f"full snapshot {slot}: {why}",
        ),
        observed,
    )


def _wanted_chain(state: RunState, base: LastBackup, stream: StreamView | None) -> ChainStart:
    """The chain to write: the recorded one, until a newer full snapshot starts the next
    and the recorded chain has reached that snapshot's revision. How far it got: the
    writer's word when one runs in this process, else what status recorded of it (after an
    operator restart or a failed writer), so a hand-over never leaves revisions between."""
    current = state.continuous.current
    newer = ChainStart(chain_id(base.cluster_id, base.revision), base.cluster_id, base.key, base.revision)
    if current is None or current.chain == newer.chain:
        return newer
    if base.cluster_id != current.cluster_id or base.revision <= current.base_revision:
        return current  # a base of another cluster only follows a break (needs_base)
    reached = state.continuous.last_revision
    if stream is not None and stream.chain == current.chain:
        reached = max(reached, stream.last_revision)
    if reached < base.revision:
        return current  # hand over once the running chain holds every revision up to the new base
    return newer


def _plan_continuous(
    spec: ScheduleSpec, continuous: ContinuousSpec, state: RunState, observed: Observed, now: datetime.datetime
) -> s.Step:
    expression, stream = spec.schedule, observed.stream
    if expression is not None:
        problem = schedule.problem(expression, now)
        if problem:
            return _stopping(observed, s.RefuseSchedule(reason=problem.reason, message=problem.message))
    if spec.suspend:
        return _stopping(observed, s.Suspend(message="spec.suspend is set"))
    cluster = observed.prerequisites.cluster if observed.prerequisites is not None else None
    if cluster is not None and cluster.hibernation is not None and cluster.hibernation.state == hibernation.STOPPING:
        return _write_to_the_end(state, observed, cluster)
    asleep = _cluster_asleep(observed)
    if asleep is not None:
        return _stopping(observed, asleep)
    if state.slot_in_progress:
        return when_ready(_run(spec, state, state.slot_in_progress, one_shot=False), observed)
    if state.retry and state.retry.at <= now:
        return _retry_run(spec, state, state.retry, observed, one_shot=False)
    step = _before_hibernation(state, observed, now)
    if step:
        return step
    base, record = state.last_backup, state.continuous
    if base is None or record.needs_base:
        if state.retry:
            return _waiting_for_retry(state.retry)
        if base is None:
            return _full_snapshot(observed, now, "no full snapshot to start from yet", WAITING_FOR_BASE)
        return _full_snapshot(observed, now, "the chain broke since the newest one", CHAIN_BROKEN)
    wanted = _wanted_chain(state, base, stream)
    if stream is None or stream.chain != wanted.chain:
        return when_ready(
            s.StartStream(start=wanted, message=f"writing chain {wanted.chain} from revision {wanted.base_revision}"),
            observed,
        )
    if not state.retry:
        auth_moved = _auth_moved_since(base, stream, record.auth_read)
        if auth_moved:
            return _full_snapshot(observed, now, auth_moved)
        if record.events_since_full >= continuous.full_snapshot_after_events:
            return _full_snapshot(observed, now, f"{record.events_since_full} events since the last one")
        if record.bytes_since_full >= continuous.full_snapshot_after_bytes:
            return _full_snapshot(observed, now, f"{record.bytes_since_full} bytes since the last one")
    next_slot = None
    if expression is not None:
        due = schedule.due(expression, state.last_slot, observed.created, now)
        if due.slot is not None:
            slot = schedule.slot_name(due.slot)
            return when_ready(
                s.StartSlot(
                    slot=slot,
                    slot_time=due.slot,
                    next_slot=due.next_slot,
                    one_shot=False,
                    message=f"scheduled slot {slot}",
                ),
                observed,
            )
        next_slot = due.next_slot
    verify = verification_due(spec.verification, state, observed, now) or retry_due(spec.verification, state, now)
    if verify is not None:
        return verify
    retrying = f"; slot {state.retry.slot} is tried again at {state.retry.at.isoformat()}" if state.retry else ""
    return s.Stream(chain=wanted.chain, next_slot=next_slot, message=f"writing chain {wanted.chain}{retrying}")


def _auth_moved_since(base: LastBackup, stream: StreamView, recorded: AuthRead | None) -> str | None:
    """Why the chain of `base` needs a new base for auth: the newest auth revision read of its
    cluster, by its writer or as status recorded one (status.continuous.authRead, which an
    operator restart keeps), is newer than `base` recorded. None while either is unknown, or
    the writer runs an older chain (a newer base is taken already)."""
    if base.auth_revision is None or stream.chain != chain_id(base.cluster_id, base.revision):
        return None
    readings = (stream.auth_revision, recorded.of(base.cluster_id) if recorded is not None else None)
    newest = max((r for r in readings if r is not None), default=None)
    if newest is None or newest <= base.auth_revision:
        return None
    return (
        f"etcd's auth revision is {newest}, {base.key} holds {base.auth_revision}: users or roles "
        f"changed, which segments do not record"
    )


def _write_to_the_end(state: RunState, observed: Observed, cluster: ClusterReadiness) -> s.Step:
    """The cluster's members stop: its chain is written on, so that it holds every
    revision they acknowledge until no quorum is left; nothing else starts."""
    base, stream = state.last_backup, observed.stream
    if base is None or state.continuous.needs_base:
        return _stopping(observed, s.WaitForPrerequisite(reason=CLUSTER_HIBERNATED, message=_no_chain_message(cluster)))
    wanted = _wanted_chain(state, base, stream)
    if stream is None or stream.chain != wanted.chain:
        prerequisites = observed.prerequisites
        awake = dataclasses.replace(cluster, hibernation=None)
        wait = dataclasses.replace(prerequisites, cluster=awake).wait() if prerequisites is not None else None
        if wait is not None:
            return s.WaitForPrerequisite(reason=wait.reason, message=wait.message)
        return s.StartStream(
            start=wanted,
            message=f"the cluster's members stop: writing chain {wanted.chain} from revision {wanted.base_revision} "
            f"to the last revision they acknowledge",
        )
    return s.Stream(
        chain=wanted.chain,
        next_slot=None,
        message=f"the cluster's members stop: writing chain {wanted.chain} to the last revision they acknowledge",
    )


def _no_chain_message(cluster: ClusterReadiness) -> str:
    state = cluster.hibernation.state if cluster.hibernation is not None else ""
    return (
        f"the cluster is going to sleep ({state}) and this backup has no chain to write; "
        f"a full snapshot is taken once it is awake"
    )


def _cluster_asleep(observed: Observed) -> s.WaitForPrerequisite | None:
    """The cluster's members stop, are stopped or are waking: a continuous writer stops."""
    cluster = observed.prerequisites.cluster if observed.prerequisites is not None else None
    if cluster is None or not cluster.asleep:
        return None
    wait = observed.prerequisites.wait() if observed.prerequisites is not None else None
    return s.WaitForPrerequisite(reason=wait.reason, message=wait.message) if wait else None


def _before_hibernation(state: RunState, observed: Observed, now: datetime.datetime) -> s.Step | None:
    """A full snapshot at once when the cluster is going to sleep (core/hibernation.py) and
    the newest one does not hold the revision it recorded; a pending retry runs first."""
    cluster = observed.prerequisites.cluster if observed.prerequisites is not None else None
    record = cluster.hibernation if cluster is not None else None
    if record is None or record.state != hibernation.SNAPSHOTTING or state.retry:
        return None
    last = state.last_backup
    if last is not None and hibernation.snapshot_holds(record, last.cluster_id, last.revision):
        return None
    return _full_snapshot(
        observed,
        now,
        f"the cluster is going to sleep; its members stop once a snapshot holds revision {record.revision}",
    )


def when_ready(step: s.Step, observed: Observed) -> s.Step:
    """`step` starts or runs a slot: while what a run needs is missing, it waits instead."""
    wait = observed.prerequisites.wait() if observed.prerequisites is not None else None
    if wait is None:
        return step
    return s.WaitForPrerequisite(reason=wait.reason, message=wait.message)


def _run(spec: ScheduleSpec, state: RunState, slot: str, one_shot: bool) -> s.RunBackup:
    attempt = max(state.attempts, 1)
    return s.RunBackup(
        slot=slot,
        one_shot=one_shot,
        attempt=attempt,
        backoff_limit=spec.backoff_limit,
        pending_uploads=state.pending_uploads,
        cluster_id_history=state.cluster_id_history,
        continuous_chain=state.continuous.current.chain if state.continuous.current else None,
        message=f"finishing slot {slot} (attempt {attempt} of {spec.backoff_limit + 1})",
    )


def _retry_run(
    spec: ScheduleSpec, state: RunState, pending: PendingRetry, observed: Observed, one_shot: bool
) -> s.Step:
    """The retry of a failed slot, now due."""
    attempt = state.attempts + 1
    return when_ready(
        s.RetrySlot(
            slot=pending.slot,
            attempt=attempt,
            one_shot=one_shot,
            message=f"slot {pending.slot} again: attempt {attempt} of {spec.backoff_limit + 1}",
        ),
        observed,
    )


def _waiting_for_retry(
    pending: PendingRetry, next_slot: datetime.datetime | None = None, recheck_at: datetime.datetime | None = None
) -> s.WaitForRetry:
    return s.WaitForRetry(
        slot=pending.slot,
        retry_at=pending.at,
        next_slot=next_slot,
        recheck_at=recheck_at,
        message=f"slot {pending.slot} is tried again at {pending.at.isoformat()}",
    )


def verification_due(
    policy: VerificationPolicy, state: RunState, observed: Observed, now: datetime.datetime
) -> s.StartVerification | None:
    """A first attempt at verifying the newest backup, when the policy says so."""
    key = state.last_backup_key
    if not policy.enabled or not key or key == state.last_verification_key:
        return None
    if state.verification is not None and state.verification.key == key:
        return None  # already tried: retries follow the backoff (retry_due)
    if policy.schedule is not None:
        if schedule.problem(policy.schedule, now):
            return None
        due = schedule.due(policy.schedule, state.last_verification_slot, observed.created, now)
        if due.slot is None:
            return None
        return s.StartVerification(key=key, attempt=1, slot_time=due.slot, message=f"verification slot for {key}")
    if state.backups_since_verification < policy.every_n:
        return None
    return s.StartVerification(key=key, attempt=1, message=f"verifying {key}")


@dataclasses.dataclass(frozen=True)
class _VerificationRetry:
    tried: VerificationAttempts
    at: datetime.datetime  # tried.next_attempt, known to be set


def _retry(policy: VerificationPolicy, state: RunState) -> _VerificationRetry | None:
    """The incomplete verification waiting for its next attempt, if it may still have one."""
    tried = state.verification
    if not policy.enabled or tried is None or tried.next_attempt is None or not retry.pending(tried):
        return None
    if tried.key == state.last_verification_key:
        return None
    if tried.key != state.last_backup_key and tried.key not in state.recent_keys:
        return None  # the backup left status (retention): nothing left to retry
    return _VerificationRetry(tried, tried.next_attempt)


def retry_due(policy: VerificationPolicy, state: RunState, now: datetime.datetime) -> s.StartVerification | None:
    pending = _retry(policy, state)
    if pending is None or pending.at > now:
        return None
    tried = pending.tried
    attempt = tried.attempts + 1
    return s.StartVerification(
        key=tried.key,
        attempt=attempt,
        message=f"verifying {tried.key} again (attempt {attempt} of {retry.MAX_ATTEMPTS}; "
        f"the last gave no verdict: {tried.reason})",
    )


def _retry_at(policy: VerificationPolicy, state: RunState) -> datetime.datetime | None:
    pending = _retry(policy, state)
    return None if pending is None else pending.at


def verification_in_progress(attempt: VerificationAttempts, observed: Observed, now: datetime.datetime) -> s.Step:
    """The next step of the attempt recorded in status, from its scratch pod as observed."""
    key = attempt.key
    if attempt.running is None:
        raise ValueError(f"no verification attempt of {key} is in progress")
    recorded = attempt.running.pod  # None until the pass that created it recorded it
    timed_out = (now - attempt.running.start_time).total_seconds() > retry.START_TIMEOUT_SECONDS
    timeout = s.FinishVerification(
        key=key,
        pod_name=recorded.name if recorded else None,
        pod_uid=recorded.uid if recorded else None,
        verified=None,
        reason="ScratchPodTimeout",
        message=f"the scratch pod did not finish its check within "
        f"{retry.START_TIMEOUT_SECONDS:.0f}s of the attempt's start",
    )
    if not observed.scratch_pod_observed:
        return s.WaitForScratchPod(key=key, message="the scratch pod was not observed in this pass")
    pod = observed.scratch_pod
    if pod is not None and not pod.owned:
        return s.FinishVerification(
            key=key,
            pod_name=None,
            pod_uid=None,
            verified=None,
            reason="ScratchPodNameTaken",
            message=f"pod {pod.name} is not owned by this EtcdBackup; it is left alone",
        )
    if pod is not None and (recorded is None or pod.uid != recorded.uid):
        if timed_out:
            return timeout
        return s.DeleteStrayScratchPod(
            key=key,
            pod_name=pod.name,
            pod_uid=pod.uid,
            message=f"deleting pod {pod.name} (uid {pod.uid}): not the scratch pod this attempt recorded",
        )
    if pod is None:
        if recorded is None:
            return timeout if timed_out else s.CreateScratchPod(key=key, message=f"creating the scratch pod for {key}")
        return s.FinishVerification(
            key=key,
            pod_name=recorded.name,
            pod_uid=recorded.uid,
            verified=None,
            reason="ScratchPodGone",
            message=f"scratch pod {recorded.name} (uid {recorded.uid}) disappeared before it was compared",
        )
    if pod.init_failure is not None:
        failure = pod.init_failure
        verdict = init_failure_verdict(failure.container, failure.exit_code, failure.message)
        return _finish(key, pod, verdict)
    if pod.check is not None:
        return _finish(key, pod, check_verdict(pod.check.exit_code, pod.check.message))
    if pod.phase == "Failed":
        return s.FinishVerification(
            key=key,
            pod_name=pod.name,
            pod_uid=pod.uid,
            verified=None,
            reason="ScratchPodFailed",
            message=f"pod {pod.name} failed: {pod.message}",
        )
    if timed_out:
        return timeout
    return s.WaitForScratchPod(
        key=key,
        message=f"waiting for scratch pod {pod.name} to check {key} (attempt {attempt.attempts}): {pod.message}",
    )


def _finish(key: str, pod: ScratchPod, verdict: Verdict) -> s.FinishVerification:
    return s.FinishVerification(
        key=key,
        pod_name=pod.name,
        pod_uid=pod.uid,
        verified=verdict.verified,
        reason=verdict.reason,
        message=verdict.message,
        complete=verdict.complete,
    )


def _plan_one_shot(spec: ScheduleSpec, state: RunState, observed: Observed, now: datetime.datetime) -> s.Step:
    policy = spec.verification
    if state.slot_in_progress:
        return when_ready(_run(spec, state, state.slot_in_progress, one_shot=True), observed)
    if state.retry:
        if state.retry.at > now:
            return _waiting_for_retry(state.retry)
        return _retry_run(spec, state, state.retry, observed, one_shot=True)
    if state.phase == COMPLETED:
        verify = verification_due(policy, state, observed, now) or retry_due(policy, state, now)
        if verify is not None:
            return verify
        retry_at = _retry_at(policy, state)
        if retry_at is not None:
            return s.Idle(
                recheck_at=retry_at,
                message=f"the one-shot backup completed; its verification is retried at {retry_at.isoformat()}",
            )
        return s.Idle(message="the one-shot backup completed")
    if state.phase == FAILED and state.observed_generation == observed.generation:
        return s.Idle(message="the one-shot backup failed; it runs again when its spec changes")
    slot = one_shot_slot(observed)
    return when_ready(
        s.StartSlot(slot=slot, slot_time=None, next_slot=None, one_shot=True, message=f"one-shot backup, slot {slot}"),
        observed,
    )


def _plan_scheduled(spec: ScheduleSpec, state: RunState, observed: Observed, now: datetime.datetime) -> s.Step:
    expression, policy = spec.schedule, spec.verification
    if expression is None:
        raise ValueError("_plan_scheduled needs a schedule; a one-shot backup is planned by _plan_one_shot")
    problem = schedule.problem(expression, now)
    if problem:
        return s.RefuseSchedule(reason=problem.reason, message=problem.message)
    if spec.suspend:
        return s.Suspend(message="spec.suspend is set")
    if state.slot_in_progress:
        return when_ready(_run(spec, state, state.slot_in_progress, one_shot=False), observed)
    step = _before_hibernation(state, observed, now)
    if step:
        return step
    verify = verification_due(policy, state, observed, now)
    if verify is not None:
        return verify
    due = schedule.due(expression, state.last_slot, observed.created, now)
    if due.slot is not None:  # a newer slot replaces a retry of an older one
        slot = schedule.slot_name(due.slot)
        return when_ready(
            s.StartSlot(
                slot=slot, slot_time=due.slot, next_slot=due.next_slot, one_shot=False, message=f"scheduled slot {slot}"
            ),
            observed,
        )
    if state.retry and state.retry.at <= now:
        return _retry_run(spec, state, state.retry, observed, one_shot=False)
    verify = retry_due(policy, state, now)
    if verify is not None:
        return verify
    pending = _retry(policy, state)
    retry_at = pending.at if pending else None
    if state.retry:
        return _waiting_for_retry(state.retry, due.next_slot, retry_at)
    retrying = f"; verification of {pending.tried.key} retried at {pending.at.isoformat()}" if pending else ""
    return s.WaitForSlot(
        next_slot=due.next_slot, recheck_at=retry_at, message=f"next slot {schedule.slot_name(due.next_slot)}{retrying}"
    )
