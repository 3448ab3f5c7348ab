"""The backup planner when a run cannot start yet or fails: it waits for its cluster and its
Secrets (phase Pending), retries a cause that may pass with backoff up to spec.backoffLimit
(like a Kubernetes Job), fails at once on one that cannot, and starts nothing for an object
being deleted. Pure: plan() and build_status() driven directly."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from etcd_operator.clients.etcd.client import EtcdError
from etcd_operator.clients.storage.credentials import s3_location
from etcd_operator.clients.storage.s3 import StorageError
from etcd_operator.controllers.backup.failure import BackupFailed, as_failure
from etcd_operator.controllers.backup.reconciler import PREREQUISITE_RECHECK, delay_after
from etcd_operator.controllers.backup.source_candidates import SourceUnavailable, find_candidates
from etcd_operator.controllers.backup.stream import SnapshotCorrupt
from etcd_operator.core import prerequisites as p
from etcd_operator.core.backup import schedule
from etcd_operator.core.backup import steps as s
from etcd_operator.core.backup.planner import one_shot_slot, plan
from etcd_operator.core.backup.state import Observed, Prerequisites, RunState, ScheduleSpec, VerificationPolicy
from etcd_operator.core.backup.status import build_status, run_events
from etcd_operator.core.buffer_budget import BudgetTooSmall
from etcd_operator.core.leadership_fence import LeadershipLost
from etcd_operator.core.status_patch import changed_fields as changes
from tests.unit.test_backup_planner import merge_patch

UTC = datetime.UTC
T0 = datetime.datetime(2026, 11, 21, 12, 0, 1, tzinfo=UTC)
ONE_SHOT = ScheduleSpec(None)

RUNNING = p.ClusterReadiness("Running", available=True, ready_members=3)
READY = Prerequisites("ns", "db", RUNNING)


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def text(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def seen(prerequisites: Prerequisites | None = READY, generation: int = 1, deleting: bool = False) -> Observed:
    return Observed(T0, generation, prerequisites=prerequisites, deleting=deleting)


def one_pass(
    spec: ScheduleSpec,
    status: dict,
    now: datetime.datetime,
    observed: Observed | None = None,
    run: s.Outcome | None = None,
) -> tuple[s.Step, dict, list]:
    """A pass as the controller makes it: the step, the status as the API server then has
    it, and the run's events. A run succeeds unless `run` says otherwise."""
    step = plan(spec, RunState.from_dict(status), observed or seen(), now.timestamp())
    outcome: s.Outcome = s.NOTHING_DONE
    if isinstance(step, s.RunBackup):
        outcome = run or s.RunSucceeded(record={"key": f"p/ns/b/{step.slot}.db"}, completed_at=text(now))
    written = build_status(step, outcome, status, (observed or seen()).generation, text(now))
    return step, merge_patch(status, changes(status, written)), run_events(step, outcome, written)


def condition(status: dict, type_: str) -> dict:
    return next(c for c in status["conditions"] if c["type"] == type_)


NO_MEMBER = s.RunFailed(reason="NoHealthyMember", message="no healthy member", transient=True)
NO_BUCKET = s.RunFailed(reason="BucketNotFound", message="S3: NoSuchBucket", transient=False)


# --- objects that arrive early wait --------------------------------------------------------

WAITS = [
    # (what was observed, the Progressing reason, words its message must hold)
    (Prerequisites("ns", "db", None), p.WAITING_FOR_CLUSTER, "EtcdCluster ns/db does not exist yet"),
    (Prerequisites("ns", "db", p.ClusterReadiness()), p.WAITING_FOR_BOOTSTRAP, "phase not reported yet"),
    (
        Prerequisites("ns", "db", p.ClusterReadiness("Creating", False, 0)),
        p.WAITING_FOR_BOOTSTRAP,
        "still bootstrapping (phase Creating, 0 members ready)",
    ),
    (Prerequisites("ns", "db", p.ClusterReadiness("Creating", True, 0)), p.WAITING_FOR_BOOTSTRAP, "Creating"),
    (
        Prerequisites("ns", "db", p.ClusterReadiness("Restoring", False, 0)),
        p.WAITING_FOR_CLUSTER_RESTORE,
        "is being restored",
    ),
    (Prerequisites("ns", "db", RUNNING, ("s3-creds",)), p.WAITING_FOR_SECRET, "Secret ns/s3-creds does not exist"),
    (Prerequisites("ns", "db", None, ("s3-creds",)), p.WAITING_FOR_CLUSTER, "EtcdCluster ns/db"),  # one at a time
]


@pytest.mark.parametrize("prerequisites, reason, words", WAITS)
@pytest.mark.parametrize("spec, now", [(ONE_SHOT, at(0)), (ScheduleSpec("*/10 * * * *"), at(601))])
def test_a_due_run_waits_pending_for_what_is_missing_and_says_what(prerequisites, reason, words, spec, now):
    step, status, events = one_pass(spec, {}, now, seen(prerequisites))
    assert step == s.WaitForPrerequisite(reason=reason, message=step.message) and words in step.message
    assert status["phase"] == "Pending" and "progress" not in status and events == []
    progressing = condition(status, "Progressing")
    assert (progressing["status"], progressing["reason"], progressing["message"]) == ("False", reason, step.message)
    assert progressing["observedGeneration"] == 1 and progressing["lastTransitionTime"] == text(now)
    assert delay_after(step, now) == PREREQUISITE_RECHECK  # looked at again soon, not only on a spec change
    # Waiting longer writes nothing; the condition's transition time stays.
    again = plan(
        spec, RunState.from_dict(status), seen(prerequisites), (now + datetime.timedelta(seconds=3)).timestamp()
    )
    assert (
        changes(status, build_status(again, s.NOTHING_DONE, status, 1, text(now + datetime.timedelta(seconds=3)))) == {}
    )


@pytest.mark.parametrize(
    "cluster",
    [
        p.ClusterReadiness("Creating", True, 1),
        p.ClusterReadiness("Degraded", False, 0),
        p.ClusterReadiness("QuorumLost", False, 0),
        p.ClusterReadiness("Paused", True, 3),
    ],
)
def test_a_cluster_that_has_served_is_not_waited_for(cluster):
    """Bootstrapping is "not served yet"; a cluster that served and lost members is tried
    (and a failed attempt retried), so that an outage still shows as a failure."""
    step = plan(ONE_SHOT, RunState(), seen(Prerequisites("ns", "db", cluster)), at(0).timestamp())
    assert isinstance(step, s.StartSlot)


def test_an_early_one_shot_starts_as_soon_as_its_cluster_and_secret_are_there_without_a_spec_change():
    status, now = {}, at(0)
    for prerequisites in (
        Prerequisites("ns", "db", None, ("creds",)),
        Prerequisites("ns", "db", p.ClusterReadiness("Creating", False, 0), ("creds",)),
        Prerequisites("ns", "db", RUNNING, ("creds",)),
    ):
        step, status, _ = one_pass(ONE_SHOT, status, now, seen(prerequisites))
        assert isinstance(step, s.WaitForPrerequisite) and status["phase"] == "Pending"
        now += datetime.timedelta(seconds=3)
    step, status, _ = one_pass(ONE_SHOT, status, now, seen(READY))
    assert step.kind == "StartSlot" and step.slot == one_shot_slot(seen()) and status["phase"] == "Running"
    assert condition(status, "Progressing")["status"] == "True" and status["attempts"] == 1
    step, status, _ = one_pass(ONE_SHOT, status, now, seen(READY))
    assert step.kind == "RunBackup" and status["phase"] == "Completed"


def test_a_recorded_slot_waits_too_and_keeps_its_name():
    status = {"phase": "Running", "progress": {"slot": "once-x"}, "attempts": 1}
    step, status, _ = one_pass(ONE_SHOT, status, at(0), seen(Prerequisites("ns", "db", None)))
    assert isinstance(step, s.WaitForPrerequisite) and status["progress"]["slot"] == "once-x"
    step, _, _ = one_pass(ONE_SHOT, status, at(3), seen(READY))
    assert step == s.RunBackup(slot="once-x", one_shot=True, attempt=1, message=step.message)


# --- objects being deleted are left alone --------------------------------------------------


@pytest.mark.parametrize(
    "spec, status",
    [
        (ONE_SHOT, {}),  # would start its slot
        (ONE_SHOT, {"phase": "Running", "progress": {"slot": "once-x"}}),  # would upload
        (ONE_SHOT, {"phase": "Retrying", "lastFailure": {"slot": "once-x"}, "nextAttemptTime": text(at(0))}),
        (ScheduleSpec("*/10 * * * *"), {}),  # a slot is due
        (
            ScheduleSpec(None, verification=VerificationPolicy(True)),  # would create a scratch pod
            {
                "phase": "Completed",
                "lastBackup": {"key": "k1"},
                "backupsSinceVerification": 1,
                "verification": {"key": "k1", "attempts": 1, "startTime": text(at(0))},
            },
        ),
    ],
)
def test_nothing_is_started_for_a_backup_being_deleted(spec, status):
    step = plan(
        spec,
        RunState.from_dict(status),
        Observed(T0, 1, scratch_pod_observed=True, deleting=True, prerequisites=READY),
        at(601).timestamp(),
    )
    assert isinstance(step, s.Idle) and "being deleted" in step.message


# --- transient failures are retried like a Job's ---------------------------------------------


def test_a_transient_failure_is_retried_with_backoff_under_the_same_slot_until_backoff_limit():
    spec, now = ScheduleSpec(None, backoff_limit=6), at(0)
    step, status, _ = one_pass(spec, {}, now)
    slot = step.slot
    waits = []
    for attempt in range(1, 8):
        run, status, events = one_pass(spec, status, now, run=NO_MEMBER)
        assert run == s.RunBackup(slot=slot, one_shot=True, attempt=attempt, backoff_limit=6, message=run.message)
        assert (status["attempts"], status["failedAttempts"]) == (attempt, attempt)
        assert status["lastFailure"] == {
            "reason": "NoHealthyMember",
            "message": "no healthy member",
            "time": text(now),
            "slot": slot,
            "attempt": attempt,
        }
        assert "progress" not in status and condition(status, "Degraded")["reason"] == "NoHealthyMember"
        if attempt == 7:
            break
        retry_at = datetime.datetime.fromisoformat(status["nextAttemptTime"].replace("Z", "+00:00"))
        waits.append((retry_at - now).total_seconds())
        assert status["phase"] == "Retrying" and [e[:2] for e in events] == [("Warning", "BackupAttemptFailed")]
        assert f"attempt {attempt} of 7" in events[0][2] and status["nextAttemptTime"] in events[0][2]
        progressing = condition(status, "Progressing")
        assert progressing["reason"] == "BackupRetryScheduled" and status["nextAttemptTime"] in progressing["message"]
        early, status, _ = one_pass(spec, status, retry_at - datetime.timedelta(seconds=1))
        assert early == s.WaitForRetry(slot=slot, retry_at=retry_at, message=early.message)
        assert delay_after(early, retry_at - datetime.timedelta(seconds=1)) == 1.0
        now = retry_at
        again, status, _ = one_pass(spec, status, now)
        assert again == s.RetrySlot(slot=slot, attempt=attempt + 1, one_shot=True, message=again.message)
        assert status["progress"]["slot"] == slot and "nextAttemptTime" not in status and status["phase"] == "Running"
    assert waits == [10, 20, 40, 80, 160, 300]
    assert status["phase"] == "Failed" and "nextAttemptTime" not in status
    assert [e[:2] for e in events] == [("Warning", "BackupFailed")] and "backoffLimit (6)" in events[0][2]
    assert condition(status, "Progressing")["reason"] == "BackoffLimitExceeded"
    assert "backoffLimit" in condition(status, "Degraded")["message"]
    assert isinstance(
        plan(spec, RunState.from_dict(status), seen(), (now + datetime.timedelta(hours=1)).timestamp()), s.Idle
    )


def test_the_retry_after_a_success_ends_and_the_attempts_stay_in_status():
    step, status, _ = one_pass(ONE_SHOT, {}, at(0))
    _, status, _ = one_pass(ONE_SHOT, status, at(0), run=NO_MEMBER)
    step, status, _ = one_pass(ONE_SHOT, status, at(10))
    assert isinstance(step, s.RetrySlot)
    _, status, events = one_pass(ONE_SHOT, status, at(10))
    assert status["phase"] == "Completed" and events == [] and "nextAttemptTime" not in status
    assert (status["attempts"], status["failedAttempts"]) == (2, 1)
    assert condition(status, "Degraded")["status"] == "False"


def test_backoff_limit_zero_fails_at_the_first_failure():
    spec = ScheduleSpec(None, backoff_limit=0)
    _, status, _ = one_pass(spec, {}, at(0))
    _, status, events = one_pass(spec, status, at(0), run=NO_MEMBER)
    assert status["phase"] == "Failed" and [e[1] for e in events] == ["BackupFailed"]


@pytest.mark.parametrize("failure", [NO_BUCKET, s.RunFailed(reason="CredentialsNotFound", message="no key")])
def test_a_permanent_cause_fails_at_once(failure):
    _, status, _ = one_pass(ONE_SHOT, {}, at(0))
    step, status, events = one_pass(ONE_SHOT, status, at(0), run=failure)
    assert status["phase"] == "Failed" and "nextAttemptTime" not in status and status["failedAttempts"] == 1
    assert [e[:2] for e in events] == [("Warning", "BackupFailed")] and "does not pass by itself" in events[0][2]
    assert condition(status, "Degraded")["reason"] == failure.reason
    assert isinstance(plan(ONE_SHOT, RunState.from_dict(status), seen(), at(3600).timestamp()), s.Idle)


def test_waiting_for_the_cluster_does_not_use_an_attempt():
    _, status, _ = one_pass(ONE_SHOT, {}, at(0))
    _, status, _ = one_pass(ONE_SHOT, status, at(0), run=NO_MEMBER)
    gone = seen(Prerequisites("ns", "db", None))
    for seconds in (10, 13, 600):
        step, status, _ = one_pass(ONE_SHOT, status, at(seconds), gone)
        assert isinstance(step, s.WaitForPrerequisite) and status["attempts"] == 1
    step, status, _ = one_pass(ONE_SHOT, status, at(603))
    assert step == s.RetrySlot(slot=status["progress"]["slot"], attempt=2, one_shot=True, message=step.message)


# --- which causes are which (failure.as_failure) -----------------------------------------------

CAUSES = [
    (SourceUnavailable("no healthy member"), "NoHealthyMember", True),
    (SourceUnavailable("gone", reason="ClusterNotFound"), "ClusterNotFound", True),
    (SourceUnavailable("db-0 answered for cluster b2", reason="ClusterIDMismatch"), "ClusterIDMismatch", True),
    (StorageError("Secret ns/x does not exist", "SecretNotFound"), "SecretNotFound", True),
    (StorageError("cannot reach", "EndpointUnreachable"), "StorageError", True),
    (StorageError("InternalError", "InternalError"), "StorageError", True),
    (EtcdError("10.0.0.1:2379", "Snapshot", None, "leader changed"), "EtcdUnavailable", True),
    (SnapshotCorrupt("sha256 differs"), "SnapshotCorrupt", True),
    (TimeoutError(), "Timeout", True),
    (LeadershipLost("refused write"), "LeadershipLost", True),
    (RuntimeError("boom"), "Error", True),
    (StorageError("no key", "SecretKeyNotFound", permanent=True), "CredentialsNotFound", False),
    (StorageError("refused", "CredentialKeyRefused", permanent=True), "CredentialsRefused", False),
    (StorageError("NoSuchBucket", "NoSuchBucket", permanent=True), "BucketNotFound", False),
    (StorageError("AccessDenied", "AccessDenied", permanent=True), "AccessDenied", False),
    (StorageError("bad key", "InvalidAccessKeyId", permanent=True), "InvalidCredentials", False),
    (StorageError("bad sig", "SignatureDoesNotMatch", permanent=True), "InvalidCredentials", False),
    (StorageError("http", "InsecureEndpoint", permanent=True), "InsecureEndpoint", False),
    (SourceUnavailable("other shard", permanent=True, reason="ClusterOutsideShard"), "ClusterOutsideShard", False),
    (BudgetTooSmall("part too large"), "MemoryBudgetTooSmall", False),
    (BackupFailed("SlotTakenByForeignBackup", "foreign", permanent=True), "SlotTakenByForeignBackup", False),
]


@pytest.mark.parametrize("error, reason, transient", CAUSES)
def test_each_cause_is_classified_transient_or_permanent(error, reason, transient):
    failure = as_failure(error)
    assert (failure.reason, not failure.permanent) == (reason, transient)


# --- scheduled runs ------------------------------------------------------------------------------

EVERY_10_MIN = ScheduleSpec("*/10 * * * *", verification=VerificationPolicy(False))


def test_a_scheduled_run_is_retried_with_backoff_before_the_next_fire():
    step, status, _ = one_pass(EVERY_10_MIN, {}, at(601))  # the 12:10:00 slot
    slot = step.slot
    _, status, _ = one_pass(EVERY_10_MIN, status, at(601), run=NO_MEMBER)
    assert status["phase"] == "Retrying" and status["nextAttemptTime"] == text(at(611))
    wait, status, _ = one_pass(EVERY_10_MIN, status, at(605))
    assert isinstance(wait, s.WaitForRetry) and wait.slot == slot and wait.next_slot == at(1199)
    assert delay_after(wait, at(605)) == 6.0 and status["nextScheduleTime"] == text(at(1199))
    retry, status, _ = one_pass(EVERY_10_MIN, status, at(611))
    assert retry == s.RetrySlot(slot=slot, attempt=2, one_shot=False, message=retry.message)
    run, status, _ = one_pass(EVERY_10_MIN, status, at(611))
    assert run.slot == slot and run.attempt == 2 and status["phase"] == "Scheduled"
    assert status["lastBackup"]["key"].endswith(f"{slot}.db") and condition(status, "Degraded")["status"] == "False"


def test_a_newer_due_slot_wins_over_a_retry_of_an_older_one_and_only_one_slot_is_in_flight():
    spec = ScheduleSpec("*/10 * * * *", verification=VerificationPolicy(False), backoff_limit=6)
    step, status, _ = one_pass(spec, {}, at(601))
    old = step.slot
    now = at(601)
    while True:  # fail until the next retry would come after the next fire
        _, status, _ = one_pass(spec, status, now, run=NO_MEMBER)
        retry_at = datetime.datetime.fromisoformat(status["nextAttemptTime"].replace("Z", "+00:00"))
        if retry_at > at(1199):
            break
        now = retry_at
        step, status, _ = one_pass(spec, status, now)
        assert isinstance(step, s.RetrySlot) and step.slot == old
    wait, status, _ = one_pass(spec, status, at(1190))
    assert isinstance(wait, s.WaitForRetry) and delay_after(wait, at(1190)) == 9.0  # woken by the fire
    newer, status, _ = one_pass(spec, status, at(1200))
    assert newer.kind == "StartSlot" and newer.slot == schedule.slot_name(at(1199)) != old
    assert status["progress"]["slot"] == newer.slot and "nextAttemptTime" not in status
    assert (status["attempts"], status["failedAttempts"]) == (1, 0)
    run, status, _ = one_pass(spec, status, at(1200))
    assert run.slot == newer.slot and run.attempt == 1  # the old slot is never run again
    assert isinstance(plan(spec, RunState.from_dict(status), seen(), at(1300).timestamp()), s.WaitForSlot)


def test_a_scheduled_slot_that_used_its_retries_waits_for_the_next_fire():
    spec = ScheduleSpec("0 * * * *", verification=VerificationPolicy(False), backoff_limit=1)
    step, status, _ = one_pass(spec, {}, at(3600))
    _, status, _ = one_pass(spec, status, at(3600), run=NO_MEMBER)
    _, status, _ = one_pass(spec, status, at(3610))
    _, status, events = one_pass(spec, status, at(3610), run=NO_MEMBER)
    assert status["phase"] == "Scheduled" and "nextAttemptTime" not in status
    assert [e[1] for e in events] == ["BackupFailed"]
    assert isinstance(plan(spec, RunState.from_dict(status), seen(), at(3700).timestamp()), s.WaitForSlot)


# --- whole histories ------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0.5, 200),
            st.sampled_from(["ok", "transient", "permanent", "crash", "no-cluster", "bootstrapping", "no-secret"]),
        ),
        min_size=1,
        max_size=80,
    ),
    st.integers(0, 3),
)
def test_retries_reuse_their_slot_stay_bounded_and_never_overlap_another_slot(history, backoff_limit):
    """Runs fail, the operator dies before its status write, the cluster or the Secret goes:
    a run only ever runs the slot recorded in status, no slot is started twice, no slot gets
    more than backoffLimit + 1 attempts, and nothing runs while a prerequisite is missing."""
    spec = ScheduleSpec("* * * * * */30", verification=VerificationPolicy(False), backoff_limit=backoff_limit)
    observed_for = {
        "no-cluster": Prerequisites("ns", "db", None),
        "bootstrapping": Prerequisites("ns", "db", p.ClusterReadiness("Creating")),
        "no-secret": Prerequisites("ns", "db", RUNNING, ("creds",)),
    }
    status, seconds, started, attempts = {}, 0.0, [], {}
    for advance, event in history:
        seconds += advance
        observed = seen(observed_for.get(event, READY))
        step = plan(spec, RunState.from_dict(status), observed, at(seconds).timestamp())
        if event in observed_for:
            assert not isinstance(step, (s.StartSlot, s.RetrySlot, s.RunBackup))
        outcome: s.Outcome = s.NOTHING_DONE
        if isinstance(step, s.RunBackup):
            assert step.slot == status["progress"]["slot"]
            outcome = {"transient": NO_MEMBER, "permanent": NO_BUCKET}.get(
                event, s.RunSucceeded(record={"key": step.slot}, completed_at=text(at(seconds)))
            )
        if event == "crash":
            continue
        if isinstance(step, s.StartSlot):
            assert step.slot not in started
            started.append(step.slot)
        if isinstance(step, (s.StartSlot, s.RetrySlot)):
            attempts[step.slot] = attempts.get(step.slot, 0) + 1
            assert attempts[step.slot] <= backoff_limit + 1
            assert step.slot == started[-1]  # only the newest slot is ever retried
        status = merge_patch(status, changes(status, build_status(step, outcome, status, 1, text(at(seconds)))))
        if status.get("nextAttemptTime"):
            assert not status.get("progress")  # a slot waits for its retry, or runs; never both


class KubeWith:
    """A fake client holding only the given objects (resource plural, name) -> body."""

    def __init__(self, objects: dict | None = None):
        self.objects = objects or {}

    async def get(self, resource, namespace, name):
        return self.objects.get((resource.plural, name))

    async def list(self, resource, namespace, selector=None):
        return []


def failure_of(call) -> BackupFailed:
    import asyncio

    try:
        asyncio.run(call)
    except Exception as e:
        return as_failure(e)
    raise AssertionError("no failure")


S3_WITH_SECRET = {"bucket": "bk", "credentialsSecretRef": {"name": "creds"}}


@pytest.mark.parametrize(
    "call, reason, transient",
    [
        (lambda: find_candidates(KubeWith(), "ns", "db"), "ClusterNotFound", True),
        (lambda: s3_location(KubeWith(), "ns", S3_WITH_SECRET), "SecretNotFound", True),
        (
            lambda: s3_location(
                KubeWith({("secrets", "creds"): {"data": {"accessKeyID": "eA=="}}}), "ns", S3_WITH_SECRET
            ),
            "CredentialsNotFound",
            False,
        ),
    ],
)
def test_what_a_run_finds_missing_is_classified_where_it_is_found(call, reason, transient):
    """The cluster or the Secret gone between the pass that looked and the run may come
    back (the next pass waits for it); a Secret without its keys will not fix itself."""
    failure = failure_of(call())
    assert (failure.reason, not failure.permanent) == (reason, transient)
