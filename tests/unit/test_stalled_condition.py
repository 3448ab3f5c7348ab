"""kstatus' Stalled condition of each kind, built by the pure status builders from what the
observers and executors report: True, with the reason of what a person must fix, only while
the object cannot progress without one; False (NotStalled) once it recovers."""

from __future__ import annotations

import dataclasses
import datetime

import pytest

from etcd_operator.clients.etcd.client import Member
from etcd_operator.clients.storage.s3 import PERMANENT_CODES, StorageError
from etcd_operator.controllers.backup.failure import STORAGE_REASONS, as_failure
from etcd_operator.core import storage_policy
from etcd_operator.core.backup import steps as s
from etcd_operator.core.backup.keyring import KeyringError
from etcd_operator.core.backup.status import STALLED_REASONS
from etcd_operator.core.backup.status import build_status as backup_status
from etcd_operator.core.buffer_budget import BudgetTooSmall
from etcd_operator.core.cluster import builders, naming, ownership
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.decision import Decision, plan
from etcd_operator.core.cluster.health import HealthState
from etcd_operator.core.cluster.observed import MemberStatus, Observed, PodAdmission
from etcd_operator.core.cluster.planner import QUORUM_RECOVERY
from etcd_operator.core.cluster.recorded import Operation, RollRecord
from etcd_operator.core.cluster.spec import ClusterSpec
from etcd_operator.core.cluster.status import build_status as cluster_status
from etcd_operator.core.outcome import Outcome
from etcd_operator.core.restore import steps as rs
from etcd_operator.core.restore.status import build_status as restore_status
from etcd_operator.core.timefmt import format_time
from tests.unit.cluster_scenarios import NOW, RECORDED, M, decide_accepting, observed, recorded, spec
from tests.unit.test_ready_condition import running

# --- EtcdCluster ---------------------------------------------------------------------------


def stalled(decision: Decision) -> tuple[bool | None, str]:
    found = next(cond for cond in decision.conditions if cond.type == "Stalled")
    return found.status, found.reason


HEALTHY = [M(0), M(1), M(2)]


def test_a_healthy_cluster_is_not_stalled():
    s3 = spec(3)
    assert stalled(plan(s3, RECORDED, running(s3, observed(HEALTHY)), NOW)) == (False, "NotStalled")


def test_a_refused_spec_stalls_the_cluster_until_it_is_reverted():
    s3 = spec(3)
    o = running(s3, observed(HEALTHY))  # the members run 3.6.16
    refused = plan(dataclasses.replace(s3, version="3.5.21"), RECORDED, o, NOW)
    accepted = next(cond for cond in refused.conditions if cond.type == "SpecAccepted")
    assert accepted.status is False
    assert stalled(refused) == (True, accepted.reason)
    found = next(cond for cond in refused.conditions if cond.type == "Stalled")
    assert found.message == accepted.message
    assert stalled(plan(s3, RECORDED, o, NOW)) == (False, "NotStalled")


def test_a_paused_cluster_is_not_stalled_whatever_its_spec():
    s3 = dataclasses.replace(spec(3), version="3.5.21", paused=True)
    assert stalled(plan(s3, RECORDED, running(spec(3), observed(HEALTHY)), NOW)) == (False, "NotStalled")


REFUSAL = 'pods "c-2" is forbidden: no PriorityClass with name no-such-class was found'


def test_member_pods_the_api_server_refuses_on_dry_run_stall_the_cluster_until_it_accepts_them():
    s3 = spec(3)
    o = running(s3, observed([M(0), M(1)]))  # spec.size 3: c-2 is to be added
    check = plan(s3, RECORDED, o, NOW).action
    assert isinstance(check, a.CheckPodSpec)
    refusal = PodAdmission(check.member, check.pod_spec_hash, REFUSAL, ("spec.pod.priorityClassName",), 5.0)
    refused = plan(s3, RECORDED, dataclasses.replace(o, pod_admissions={check.member: refusal}), NOW)
    assert stalled(refused) == (True, "RejectedByAPIServer")
    accepted = PodAdmission(check.member, check.pod_spec_hash, age=1.0)
    after = plan(s3, RECORDED, dataclasses.replace(o, pod_admissions={check.member: accepted}), NOW)
    assert stalled(after) == (False, "NotStalled")


FOREIGN_META = {"name": "c-client", "labels": {"app": "someone-else"}, "ownerReferences": []}


def test_a_child_name_taken_by_a_foreign_object_stalls_the_cluster_until_it_is_gone():
    s3 = spec(3)
    o = running(s3, observed(HEALTHY))
    # As the executor records a write it refused (execute_children.py).
    why = ownership.foreign_reason(FOREIGN_META, o.cluster, o.uid)
    assert why is not None
    taken = dataclasses.replace(o, collisions={ownership.ref("Service", "c-client"): why})
    assert stalled(plan(s3, RECORDED, taken, NOW)) == (True, ownership.NAME_COLLISION)
    assert stalled(plan(s3, RECORDED, dataclasses.replace(o, collisions={}), NOW)) == (False, "NotStalled")


def test_a_foreign_certificate_secret_stalls_the_cluster():
    s3 = spec(3)
    o = running(s3, observed(HEALTHY))
    # As the TLS observer reads a Secret of a certificate's name (tls_observer.py).
    why = ownership.foreign_reason({**FOREIGN_META, "name": "c-client-tls"}, o.cluster, o.uid)
    assert why is not None
    foreign = dataclasses.replace(o, tls=dataclasses.replace(o.tls, foreign={"c-client-tls": why}))
    assert stalled(plan(s3, RECORDED, foreign, NOW)) == (True, ownership.FOREIGN_SECRET)


# A roll that broke a member (as in test_roll.py): the pods' hashes are the specs'.
OLD = {"size": 3, "version": "3.6.16", "recovery": {"memberUnhealthyTimeout": "60s"}}
OLD["etcd"] = {"quotaBackendBytes": 128 * 1024 * 1024}
BAD = {**OLD, "repository": "registry.invalid/etcd"}


def rolled(members: list[M], new_on: set[int], record: RollRecord) -> tuple[Observed, object]:
    o = observed(members)
    hashes = {
        True: builders.pod_spec_hash(ClusterSpec.from_dict(BAD)),
        False: builders.pod_spec_hash(ClusterSpec.from_dict(OLD)),
    }
    pods = {n: dataclasses.replace(p, spec_hash=hashes[int(n.rsplit("-", 1)[1]) in new_on]) for n, p in o.pods.items()}
    return dataclasses.replace(o, pods=pods), recorded(rollout=record)


def test_a_failed_roll_stalls_the_cluster_until_the_spec_is_reverted():
    broken = [M(0), M(1), M(2, healthy=False, waiting="ImagePullBackOff", unhealthy_for=5)]
    o, st = rolled(broken, {2}, RollRecord(last_good_spec=OLD))
    failed = decide_accepting(ClusterSpec.from_dict(BAD), o, BAD, st)
    assert isinstance(failed.action, a.RollFailed)
    assert stalled(failed)[0] is True and stalled(failed)[1] in ("RolledBack", "RollFailed")
    # The next pass rolls c-2 back: still stalled, since the spec asks for the broken pods.
    back = decide_accepting(ClusterSpec.from_dict(BAD), o, BAD, recorded(rollout=failed.rollout))
    assert isinstance(back.action, a.RollMember) and stalled(back) == (True, "RolledBack")
    # The spec reverted, every member back on the old pods: nothing is held.
    o, st = rolled(HEALTHY, set(), failed.rollout)
    reverted = decide_accepting(ClusterSpec.from_dict(OLD), o, OLD, st)
    assert stalled(reverted) == (False, "NotStalled")


def lost_quorum(approved: bool) -> Observed:
    """c-2 gone, c-0 and c-1 answering without a leader (as the observer reads them), for
    longer than the quorum-loss timeout."""
    members = [
        M(0, healthy=False, applied=50),
        M(1, healthy=False, applied=90),
        M(2, healthy=False, pod=False, pvc=False),
    ]
    o = observed(members, leader=None, no_quorum_for=600)
    statuses = {
        m.id: MemberStatus(1, m.id, 0, "3.6.16", 1, 1, m.applied, m.applied, m.applied, 3, False, ())
        for m in members
        if m.pod
    }
    etcd = dataclasses.replace(
        o.etcd,
        statuses=statuses,
        members=tuple(Member(m.id, m.name, (naming.peer_url("c", "ns", m.name),), (), False) for m in members),
    )
    return dataclasses.replace(o, etcd=etcd, recovery_approved=approved)


def test_a_lost_quorum_waiting_for_approval_is_stalled_and_an_approved_recovery_is_not():
    waiting = plan(spec(3), RECORDED, lost_quorum(approved=False), NOW)
    assert waiting.health.state == HealthState.QUORUM_LOST and isinstance(waiting.action, a.Wait)
    assert stalled(waiting) == (True, "QuorumLost")
    approved = plan(spec(3), RECORDED, lost_quorum(approved=True), NOW)
    assert isinstance(approved.action, a.BeginQuorumRecovery)
    assert stalled(approved) == (False, "NotStalled")


def test_a_quorum_recovery_under_way_that_waits_is_not_stalled():
    o = lost_quorum(approved=True)
    o = dataclasses.replace(o, pods={**o.pods, "c-0": dataclasses.replace(o.pods["c-0"], deleting=True)})
    st = recorded(operation=Operation(QUORUM_RECOVERY, "c-1", M(1).id, NOW - 5))
    waiting = plan(spec(3), st, o, NOW)
    assert waiting.health.state == HealthState.QUORUM_LOST and isinstance(waiting.action, a.Wait)
    assert "quorum recovery" in waiting.action.reason
    assert stalled(waiting) == (False, "NotStalled")


def test_stalled_moves_its_transition_time_only_when_its_status_changes():
    s3 = spec(3)
    o = running(s3, observed(HEALTHY))
    bad = dataclasses.replace(s3, version="3.5.21")

    def written(sp: ClusterSpec, previous: dict, at: float) -> dict:
        d = plan(sp, RECORDED, o, at)
        fields = cluster_status(sp, RECORDED, o, at, d.health, d.action, list(d.conditions), previous, 7)
        return next(cond for cond in fields["conditions"] if cond["type"] == "Stalled")

    first = written(bad, {}, NOW)
    assert (first["status"], first["observedGeneration"]) == ("True", 7)
    again = written(bad, {"conditions": [first]}, NOW + 60)
    assert again["lastTransitionTime"] == first["lastTransitionTime"] == format_time(NOW)
    cleared = written(s3, {"conditions": [again]}, NOW + 120)
    assert (cleared["status"], cleared["reason"]) == ("False", "NotStalled")
    assert cleared["lastTransitionTime"] == format_time(NOW + 120)


# --- EtcdBackup ---------------------------------------------------------------------------

T = "2026-11-21T12:00:00Z"
NEXT = datetime.datetime(2026, 11, 21, 13, 0, tzinfo=datetime.UTC)
RUN = s.RunBackup(slot="20261121T120000Z", one_shot=False)


def backup_pass(status: dict, step: s.Step, outcome: s.Outcome = s.NOTHING_DONE) -> dict:
    return {**status, **backup_status(step, outcome, status, 2, T)}


def backup_stalled(status: dict) -> tuple[str, str]:
    found = next(cond for cond in status["conditions"] if cond["type"] == "Stalled")
    assert found["observedGeneration"] == 2
    return found["status"], found["reason"]


def failed_run(error: Exception) -> s.RunFailed:
    """The outcome the executor returns for a run that raised `error` (executor.py)."""
    failure = as_failure(error)
    return s.RunFailed(reason=failure.reason, message=failure.message, transient=not failure.permanent)


def succeeded(key: str) -> s.RunSucceeded:
    return s.RunSucceeded(record={"key": key, "revision": 100, "clusterID": "1"}, completed_at=T)


@pytest.mark.parametrize(
    "error,reason",
    [
        (StorageError("NoSuchBucket: the bucket does not exist", "NoSuchBucket", True), "BucketNotFound"),
        (StorageError("InvalidAccessKeyId: unknown key", "InvalidAccessKeyId", True), "InvalidCredentials"),
        (StorageError("AccessDenied: denied", "AccessDenied", True), "AccessDenied"),
        (StorageError("Secret ns/s3 has no key 'accessKey'", "SecretKeyNotFound", True), "CredentialsNotFound"),
        (KeyringError("EncryptionKeyInvalid", "key 'k1' is not base64 text"), "EncryptionKeyInvalid"),
        (BudgetTooSmall("a part of 64 MiB does not fit the 16 MiB budget"), "MemoryBudgetTooSmall"),
    ],
)
def test_a_backup_failing_for_a_cause_that_does_not_pass_is_stalled_until_a_run_succeeds(error, reason):
    status = backup_pass({}, RUN, failed_run(error))
    assert backup_stalled(status) == ("True", reason)
    status = backup_pass(status, s.WaitForSlot(next_slot=NEXT))  # the next slot: still the same cause
    assert backup_stalled(status) == ("True", reason)
    assert backup_stalled(backup_pass(status, RUN, succeeded("k1"))) == ("False", "NotStalled")


def test_every_permanent_store_error_with_a_reason_of_its_own_stalls_a_backup():
    named = {STORAGE_REASONS[code] for code in PERMANENT_CODES if code in STORAGE_REASONS}
    assert named and named <= STALLED_REASONS


def test_a_failure_that_may_pass_is_retried_not_stalled():
    error = StorageError("503 SlowDown", "SlowDown", False)
    step = dataclasses.replace(RUN, backoff_limit=3)
    status = backup_pass({}, step, failed_run(error))
    assert status["phase"] == "Retrying"
    assert backup_stalled(status) == ("False", "NotStalled")


def test_a_one_shot_backup_that_failed_for_good_is_stalled():
    once = s.RunBackup(slot="once-x", one_shot=True, backoff_limit=0)  # no retry left
    status = backup_pass({}, once, failed_run(TimeoutError()))
    assert status["phase"] == "Failed"
    assert backup_stalled(status) == ("True", "Timeout")


def test_a_refused_schedule_stalls_the_backup_until_it_is_accepted():
    status = backup_pass({}, s.RefuseSchedule(reason="ScheduleNeverFires", message="no date"))
    assert backup_stalled(status) == ("True", "ScheduleNeverFires")
    assert backup_stalled(backup_pass(status, s.WaitForSlot(next_slot=NEXT))) == ("False", "NotStalled")


def test_refused_ambient_credentials_stall_the_backup():
    refused = s.RefuseCredentials(reason=storage_policy.AMBIENT_NOT_ALLOWED, message="not allowed in ns")
    assert backup_stalled(backup_pass({}, refused)) == ("True", storage_policy.AMBIENT_NOT_ALLOWED)


# --- EtcdRestore --------------------------------------------------------------------------


def restore_stalled(status: dict) -> tuple[str, str]:
    found = next(cond for cond in status["conditions"] if cond["type"] == "Stalled")
    return found["status"], found["reason"]


def test_a_restore_that_failed_for_good_is_stalled_and_a_running_or_finished_one_is_not():
    status = restore_status({}, rs.StartVerifying("checking the snapshot"), Outcome(), 1, T)
    assert restore_stalled(status) == ("False", "NotStalled")
    waiting = restore_status(status, rs.Wait("no cluster yet", code="WaitingForCluster"), Outcome(), 1, T)
    assert restore_stalled(waiting) == ("False", "NotStalled")
    failed = restore_status(status, rs.Fail("target has data", code="TargetDataExists"), Outcome(), 1, T)
    assert restore_stalled(failed) == ("True", "TargetDataExists")
    message = next(cond for cond in failed["conditions"] if cond["type"] == "Stalled")["message"]
    assert message == "target has data"
    done = restore_status(status, rs.Complete("restored", cluster_id="abc"), Outcome(), 1, T)
    assert restore_stalled(done) == ("False", "NotStalled")


def test_a_failure_found_by_the_executor_stalls_the_restore():
    outcome = Outcome(failure=("ChecksumMismatch", "the snapshot's sha256 differs from its manifest's"))
    failed = restore_status({"phase": "Verifying"}, rs.VerifySnapshot("v"), outcome, 1, T)
    assert restore_stalled(failed) == ("True", "ChecksumMismatch")
