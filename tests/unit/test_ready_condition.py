"""The Ready condition of each kind, the summary `kubectl wait --for=condition=Ready` and
kstatus (Flux, Argo CD) read, built by the pure status builders from what the observers and
steps report: True only at the desired state, False with the reason in the way."""

from __future__ import annotations

import dataclasses
import datetime

from etcd_operator.core import hibernation as h
from etcd_operator.core.backup import continuous as cb
from etcd_operator.core.backup import steps as s
from etcd_operator.core.backup.status import build_status as backup_status
from etcd_operator.core.cluster import builders, naming, quota
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.decision import Decision, plan
from etcd_operator.core.cluster.health import HealthState
from etcd_operator.core.cluster.observed import AuthView, Observed
from etcd_operator.core.cluster.recorded import ClusterStatus
from etcd_operator.core.cluster.spec import ClusterSpec, Hibernation
from etcd_operator.core.cluster.status import build_status as cluster_status
from etcd_operator.core.outcome import Outcome
from etcd_operator.core.restore import steps as rs
from etcd_operator.core.restore.status import build_status as restore_status
from tests.unit.cluster_scenarios import NOW, RECORDED, M, decide_accepting, observed, recorded, spec

# --- EtcdCluster ---------------------------------------------------------------------------

RAW_SPEC = {"size": 3, "recovery": {"memberUnhealthyTimeout": "60s", "quorumLossTimeout": "30s"}}


def running(s: ClusterSpec, o: Observed, st: ClusterStatus = RECORDED) -> Observed:
    """`o` as the observer reads a cluster that runs its spec: bound PVCs of spec.storage.size
    (requests and capacity), pods built from the pod spec the operator acts on."""
    size = quota.parse_quantity(s.storage.size)
    pvcs = {
        n: dataclasses.replace(p, requested=size, capacity=size, storage_class="standard", expandable=True)
        for n, p in o.pvcs.items()
    }
    o = dataclasses.replace(o, pvcs=pvcs)
    desired = builders.pod_spec_hash(plan(s, st, o, NOW).acting_spec)
    return dataclasses.replace(o, pods={n: dataclasses.replace(p, spec_hash=desired) for n, p in o.pods.items()})


def ready(decision: Decision) -> tuple[bool | None, str]:
    found = next(cond for cond in decision.conditions if cond.type == "Ready")
    return found.status, found.reason


def test_a_cluster_with_quorum_every_member_healthy_and_nothing_left_to_do_is_ready():
    s = spec(3)
    decision = plan(s, RECORDED, running(s, observed([M(0), M(1), M(2)])), NOW)
    assert isinstance(decision.action, a.Steady)
    assert ready(decision) == (True, "Reconciled")


def test_an_unhealthy_member_keeps_it_not_ready_with_the_health_state():
    s = spec(3)
    members = [M(0), M(1), M(2, healthy=False, unhealthy_for=5.0)]
    decision = plan(s, RECORDED, running(s, observed(members)), NOW)
    assert decision.health.state == HealthState.DEGRADED
    assert ready(decision) == (False, "Degraded")


def test_no_quorum_is_not_ready():
    s = spec(3)
    members = [M(0), M(1, healthy=False, unhealthy_for=5.0), M(2, healthy=False, unhealthy_for=5.0)]
    decision = plan(s, RECORDED, running(s, observed(members, leader=None, no_quorum_for=5.0)), NOW)
    assert not decision.health.has_quorum
    assert ready(decision) == (False, decision.health.state.value)
    assert decision.health.state in (HealthState.NO_QUORUM, HealthState.UNREACHABLE)


def test_a_member_missing_from_spec_size_is_not_ready():
    s = spec(5)
    decision = plan(s, RECORDED, running(s, observed([M(0), M(1), M(2)])), NOW)
    assert ready(decision)[0] is False


def test_a_roll_under_way_on_a_healthy_cluster_is_not_ready():
    s = spec(3)
    o = running(s, observed([M(0), M(1), M(2)]))
    stale = dataclasses.replace(o.pods["c-2"], spec_hash="old-hash")
    decision = decide_accepting(s, dataclasses.replace(o, pods={**o.pods, "c-2": stale}))
    assert decision.health.state == HealthState.HEALTHY and not isinstance(decision.action, a.Steady)
    assert ready(decision) == (False, "RollingUpdate")


def test_storage_still_growing_is_not_ready():
    s = spec(3)
    o = running(s, observed([M(0), M(1), M(2)]))
    small = dataclasses.replace(o.pvcs["data-c-0"], capacity=1 << 30)
    decision = plan(s, RECORDED, dataclasses.replace(o, pvcs={**o.pvcs, "data-c-0": small}), NOW)
    assert ready(decision) == (False, "Expanding")


def test_a_refused_spec_change_is_not_ready_with_the_refusals_reason():
    s = spec(3)
    o = running(s, observed([M(0), M(1), M(2)]))  # the members run 3.6.16
    decision = plan(dataclasses.replace(s, version="3.5.21"), RECORDED, o, NOW)
    refused = next(cond for cond in decision.conditions if cond.type == "SpecAccepted")
    assert refused.status is False
    assert ready(decision) == (False, refused.reason)


def test_authentication_asked_for_and_not_yet_on_is_not_ready():
    s = ClusterSpec.from_dict({**RAW_SPEC, "auth": {"enabled": True}})  # on a plaintext cluster: it waits
    o = running(s, observed([M(0), M(1), M(2)]))
    o = dataclasses.replace(o, auth=AuthView(read=True, enabled=False, users={"root": ("root",)}))
    decision = plan(s, RECORDED, o, NOW)
    assert ready(decision) == (False, "Enabling")


def test_paused_is_not_ready():
    s = dataclasses.replace(spec(3), paused=True)
    decision = plan(s, RECORDED, running(s, observed([M(0), M(1), M(2)])), NOW)
    assert ready(decision) == (False, "Paused")


ASLEEP = Hibernation(enabled=True, snapshot_timeout=600.0)
MEMBERS = tuple((naming.member_name("c", i), 0x100 + i) for i in range(3))


def test_a_hibernated_cluster_is_at_its_desired_state_and_ready_while_not_available():
    s = spec(3, hibernation=ASLEEP)
    st = recorded(hibernation=h.HibernationRecord(h.HIBERNATED, cluster_id=1, revision=100, members=MEMBERS))
    stopped = [M(i, pod=False, healthy=False, unhealthy_for=3600.0) for i in range(3)]
    decision = plan(s, st, observed(stopped, leader=None, no_quorum_for=3600.0), NOW)
    assert isinstance(decision.action, a.Steady)
    assert ready(decision) == (True, "Hibernated")
    available = next(cond for cond in decision.conditions if cond.type == "Available")
    assert (available.status, available.reason) == (False, "Hibernated")


def test_going_to_sleep_is_not_ready():
    s = spec(3, hibernation=ASLEEP)
    st = recorded(hibernation=h.HibernationRecord(h.STOPPING, cluster_id=1, revision=100, members=MEMBERS))
    decision = plan(s, st, running(s, observed([M(0), M(1), M(2)]), st), NOW)
    assert ready(decision) == (False, "Hibernating")


def test_the_status_selector_matches_every_member_pod_and_nothing_else():
    s = spec(3)
    o = running(s, observed([M(0), M(1), M(2)]))
    decision = plan(s, RECORDED, o, NOW)
    written = cluster_status(s, RECORDED, o, NOW, decision.health, decision.action, list(decision.conditions), {}, 4)
    terms = dict(term.split("=", 1) for term in written["selector"].split(","))
    pod = builders.member_pod(decision.acting_spec, "c", "ns", "c-1", 0x101, "c-1=x", "existing", "token")
    labels = pod["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in terms.items())
    assert terms[naming.LABEL_CLUSTER] == "c"
    other = {k: ("other" if v == "c" else v) for k, v in labels.items()}  # a pod of cluster "other"
    assert not all(other.get(k) == v for k, v in terms.items())
    ready_entry = next(cond for cond in written["conditions"] if cond["type"] == "Ready")
    assert ready_entry["observedGeneration"] == 4 == written["observedGeneration"]


# --- EtcdBackup ---------------------------------------------------------------------------

T = "2026-11-21T12:00:00Z"
NEXT = datetime.datetime(2026, 11, 21, 13, 0, tzinfo=datetime.UTC)


def backup_pass(status: dict, step: s.Step, outcome: s.Outcome = s.NOTHING_DONE) -> dict:
    return {**status, **backup_status(step, outcome, status, 2, T)}


def backup_ready(status: dict) -> tuple[str, str]:
    found = next(cond for cond in status["conditions"] if cond["type"] == "Ready")
    assert found["observedGeneration"] == 2
    return found["status"], found["reason"]


def succeeded(key: str) -> s.RunSucceeded:
    return s.RunSucceeded(record={"key": key, "revision": 100, "clusterID": "1"}, completed_at=T)


def test_a_one_shot_backup_is_ready_once_completed_and_not_while_running_or_failed():
    start = s.StartSlot(slot="once-x", slot_time=None, next_slot=None, one_shot=True)
    status = backup_pass({}, start)
    assert backup_ready(status) == ("False", "BackupRunning")
    run = s.RunBackup(slot="once-x", one_shot=True)
    assert backup_ready(backup_pass(status, run, succeeded("k"))) == ("True", "Completed")
    failed = backup_pass(status, run, s.RunFailed(reason="BucketNotFound", message="no such bucket"))
    assert failed["phase"] == "Failed"
    assert backup_ready(failed) == ("False", "BucketNotFound")


def test_a_schedule_is_ready_while_its_last_run_succeeded():
    status = backup_pass({}, s.WaitForSlot(next_slot=NEXT))
    assert backup_ready(status) == ("False", "WaitingForSlot")  # no backup yet
    run = s.RunBackup(slot="20261121T120000Z", one_shot=False)
    status = backup_pass(status, run, succeeded("k1"))
    assert backup_ready(status) == ("True", "BackupSucceeded")
    start = s.StartSlot(slot="20261121T130000Z", slot_time=NEXT, next_slot=None, one_shot=False)
    assert backup_ready(backup_pass(status, start)) == ("True", "BackupSucceeded")  # a run under way
    status = backup_pass(status, run, s.RunFailed(reason="AccessDenied", message="denied", transient=False))
    assert backup_ready(status) == ("False", "AccessDenied")
    status = backup_pass(status, s.WaitForSlot(next_slot=NEXT))
    assert backup_ready(status) == ("False", "AccessDenied")  # until a run succeeds
    assert backup_ready(backup_pass(status, run, succeeded("k2"))) == ("True", "BackupSucceeded")


def test_a_backup_that_failed_verification_is_not_ready():
    run = s.RunBackup(slot="20261121T120000Z", one_shot=False)
    status = backup_pass({}, run, succeeded("k1"))
    finish = s.FinishVerification(key="k1", pod_name="b-verify", pod_uid="u1", verified=False, reason="Mismatch")
    verdict = s.VerificationDone(key="k1", verified=False, reason="Mismatch", message="differs", at=T)
    status = backup_pass(status, finish, verdict)
    assert backup_ready(status) == ("False", "BackupVerificationFailed")


def test_a_refused_schedule_is_not_ready():
    refused = s.RefuseSchedule(reason="ScheduleNeverFires", message="no date")
    assert backup_ready(backup_pass({}, refused)) == ("False", "ScheduleNeverFires")


CHAIN = "1-100"
START = cb.ChainStart(CHAIN, "1", "p/ns/b/full.db", 100)


def streaming_after_base() -> dict:
    base = s.RunBackup(slot="full-x", one_shot=False)
    return backup_pass({}, base, succeeded("p/ns/b/full.db"))


def test_a_continuous_backup_is_ready_once_the_writer_streams_and_caught_up_with_the_cluster():
    status = backup_pass(streaming_after_base(), s.StartStream(start=START), s.StreamReport(view=None))
    assert backup_ready(status) == ("False", "Starting")
    view = cb.StreamView(chain=CHAIN, last_revision=150, cluster_revision=160)
    status = backup_pass(status, s.Stream(chain=CHAIN), s.StreamReport(view=view))
    assert backup_ready(status) == ("False", "CatchingUp")
    caught = dataclasses.replace(view, last_revision=160, caught_up=(160, 1_000.0))
    status = backup_pass(status, s.Stream(chain=CHAIN), s.StreamReport(view=caught))
    assert status["continuous"]["caughtUp"]["chain"] == CHAIN
    assert backup_ready(status) == ("True", "CaughtUp")
    failing = dataclasses.replace(caught, store_error="503 SlowDown")
    assert backup_ready(backup_pass(status, s.Stream(chain=CHAIN), s.StreamReport(view=failing))) == (
        "False",
        "StoreUnavailable",
    )


def test_a_caught_up_record_of_an_older_chain_does_not_make_a_new_chain_ready():
    status = backup_pass(streaming_after_base(), s.StartStream(start=START), s.StreamReport(view=None))
    caught = cb.StreamView(chain=CHAIN, last_revision=160, caught_up=(160, 1_000.0))
    status = backup_pass(status, s.Stream(chain=CHAIN), s.StreamReport(view=caught))
    newer = cb.ChainStart("1-200", "1", "p/ns/b/new.db", 200)
    view = cb.StreamView(chain="1-200", last_revision=200)
    status = backup_pass(status, s.StartStream(start=newer), s.StreamReport(view=view))
    assert backup_ready(status) == ("False", "CatchingUp")


def test_a_writer_stopped_on_purpose_leaves_the_last_backups_reading():
    status = backup_pass(streaming_after_base(), s.StopStream(reason="Disabled", message="not continuous"))
    assert backup_ready(status) == ("True", "BackupSucceeded")


# --- EtcdRestore --------------------------------------------------------------------------


def restore_ready(status: dict) -> tuple[str, str]:
    found = next(cond for cond in status["conditions"] if cond["type"] == "Ready")
    return found["status"], found["reason"]


def test_a_restore_is_ready_once_completed_not_while_running_and_failed_for_good():
    status = restore_status({}, rs.StartVerifying("checking the snapshot"), Outcome(), 1, T)
    assert restore_ready(status) == ("False", "Verifying")
    waiting = restore_status(status, rs.Wait("no cluster yet", code="WaitingForCluster"), Outcome(), 1, T)
    assert restore_ready(waiting) == ("False", "WaitingForCluster")
    done = restore_status(status, rs.Complete("restored", cluster_id="abc"), Outcome(), 1, T)
    assert done["phase"] == "Completed" and restore_ready(done) == ("True", "Restored")
    failed = restore_status(status, rs.Fail("target has data", code="TargetDataExists"), Outcome(), 1, T)
    assert restore_ready(failed) == ("False", "Failed")
    message = next(cond for cond in failed["conditions"] if cond["type"] == "Ready")["message"]
    assert message.startswith("TargetDataExists: ")


def test_a_restore_already_applied_is_ready():
    status = restore_status({"phase": "Pending"}, rs.SkipAlreadyApplied("applied at T"), Outcome(), 1, T)
    assert restore_ready(status) == ("True", "AlreadyApplied")
