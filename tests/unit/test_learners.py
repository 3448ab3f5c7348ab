"""A joining learner says how far it is, a learner that did not catch up is counted, and the
next member is added only after a backoff (cluster/learners.py)."""

from __future__ import annotations

import asyncio
import dataclasses

from etcd_operator.controllers.cluster.metrics_watcher import MemberMetricsWatcher
from etcd_operator.controllers.cluster.observer import ClusterObserver
from etcd_operator.controllers.cluster.reconciler import ClusterReconciler
from etcd_operator.core.cluster import builders, learners
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.decision import plan
from etcd_operator.core.cluster.observed import MemberStatus
from etcd_operator.core.cluster.recorded import JoinRecord
from etcd_operator.core.cluster.spec import ClusterSpec
from etcd_operator.core.cluster.timers import Sightings, carry_timers
from tests.unit.cluster_scenarios import NOW, RECORDED, M, health_of, observed, recorded, spec
from tests.unit.test_cluster_planner import next_step
from tests.unit.test_watch_reconcile import RecordingKube

LEARNER = M(3, learner=True, started=False, healthy=False, unhealthy_for=10)


def answering_learner(applied: int, committed: int, leader_committed: int = 20_000, unhealthy_for: float = 10):
    """Three voters and a learner that answers Status but has not published itself."""
    o = observed(
        [M(0, applied=leader_committed), M(1), M(2), dataclasses.replace(LEARNER, unhealthy_for=unhealthy_for)]
    )
    learner = next(m for m in o.etcd.members if m.is_learner)
    leader = o.etcd.statuses[o.etcd.leader_id]
    statuses = {
        **o.etcd.statuses,
        learner.id: MemberStatus(1, learner.id, leader.member_id, "3.6.16", 1, 1, 5, committed, applied, 2, True, ()),
    }
    return dataclasses.replace(o, etcd=dataclasses.replace(o.etcd, statuses=statuses))


def condition(o, s=None, st=RECORDED):
    s = s or spec(5)
    return learners.condition(st.learner_joins, o, health_of(s, o, st), next_step(s, o, st))


def test_a_learner_too_far_behind_to_publish_says_so():
    o = answering_learner(applied=2_100, committed=9_000)
    cond = condition(o)
    assert (cond.status, cond.reason) == (True, "TooFarBehind")
    assert "applied index 2100 of the leader's 20000 (17900 behind)" in cond.message
    assert "too many requests" in cond.message and "not published" in cond.message


def test_a_learner_catching_up_within_the_gap_is_catching_up():
    cond = condition(answering_learner(applied=8_000, committed=9_000))
    assert (cond.status, cond.reason) == (True, "CatchingUp")
    assert "too many requests" not in cond.message


def test_a_learner_that_does_not_answer_is_unreachable():
    cond = condition(observed([M(0), M(1), M(2), LEARNER]))
    assert (cond.status, cond.reason) == (True, "LearnerUnreachable")


def test_no_learner_no_backoff():
    cond = condition(observed([M(0), M(1), M(2)]), spec(3))
    assert (cond.status, cond.reason) == (False, "NoLearner")


def test_an_unpublished_learner_that_answers_runs_the_timer_and_is_removed_with_its_progress():
    # Status answers with a leader, so the member is "healthy"; unpublished, it serves
    # nothing, and the catch-up timer must run for it all the same.
    o = answering_learner(applied=2_100, committed=9_000)
    o = dataclasses.replace(o, unhealthy_for={})
    o, seen = carry_timers(RECORDED, o, Sightings(), 100.0)
    assert o.unhealthy_for == {"c-3": 0.0}
    o, seen = carry_timers(RECORDED, o, seen, 140.0)  # passes come every few seconds
    o, _ = carry_timers(RECORDED, o, seen, 161.0)
    assert o.unhealthy_for == {"c-3": 61.0}
    step = next_step(spec(5), o)
    assert isinstance(step, a.RemoveMember) and step.learner_not_caught_up and not step.replacing
    assert "did not catch up in 61s" in step.reason and "too many requests" in step.reason
    assert "the next member is added after 30s (failure 1 in a row)" in step.reason


def test_a_removal_is_counted_once_per_learner_and_a_promotion_clears_the_count():
    o = answering_learner(applied=2_100, committed=9_000, unhealthy_for=61)
    step = next_step(spec(5), o)
    record = learners.next_record(RECORDED.learner_joins, step, NOW)
    assert (record.failures, record.last_failure_at, record.last_member_id) == (1, NOW, step.member_id)
    retried = recorded(learner_joins=record)  # the removal failed; tried again
    assert learners.next_record(record, next_step(spec(5), o, retried, now=NOW + 5), NOW + 5) == record
    promoting = observed([M(0), M(1), M(2), M(3, learner=True)])
    assert isinstance(next_step(spec(5), promoting, retried), a.PromoteLearner)
    assert learners.next_record(record, next_step(spec(5), promoting, retried), NOW) == JoinRecord()


def test_the_next_add_waits_a_backoff_that_doubles_with_each_failure():
    three = observed([M(0), M(1), M(2)])
    once = recorded(learner_joins=JoinRecord(1, NOW, 0x103, "it did not catch up"))
    assert isinstance(next_step(spec(5), dataclasses.replace(three, since_join_failure=29), once), a.Wait)
    assert isinstance(next_step(spec(5), dataclasses.replace(three, since_join_failure=30), once), a.AddLearner)
    twice = recorded(learner_joins=JoinRecord(2, NOW, 0x104, "it did not catch up"))
    waiting = next_step(spec(5), dataclasses.replace(three, since_join_failure=59), twice)
    assert isinstance(waiting, a.Wait) and "2 learner(s) in a row did not catch up" in waiting.reason
    assert isinstance(next_step(spec(5), dataclasses.replace(three, since_join_failure=60), twice), a.AddLearner)
    cond = condition(dataclasses.replace(three, since_join_failure=59), st=twice)
    assert (cond.status, cond.reason) == (False, "BackingOff")
    assert learners.join_backoff(20) == learners.JOIN_BACKOFF_MAX


def test_the_backoff_is_timed_by_this_process_never_from_the_time_in_status():
    # The failure's time in status is long past (or from a clock ahead): a process that has
    # not seen it yet waits the full backoff from its own first sighting.
    long_ago = JoinRecord(1, NOW - 3600, 0x103, "it did not catch up")
    o, st = observed([M(0), M(1), M(2)]), recorded(learner_joins=long_ago)
    o1, seen = carry_timers(st, o, Sightings(), 500.0)
    assert o1.since_join_failure == 0.0 and isinstance(next_step(spec(5), o1, st), a.Wait)
    o2, seen = carry_timers(st, o, seen, 520.0)
    assert o2.since_join_failure == 20.0 and isinstance(next_step(spec(5), o2, st), a.Wait)
    o3, seen = carry_timers(st, o, seen, 530.0)
    assert isinstance(next_step(spec(5), o3, st), a.AddLearner)
    # A new failure (another learner's id) starts the clock again.
    again = recorded(learner_joins=JoinRecord(2, NOW, 0x104, "it did not catch up"))
    o4, _ = carry_timers(again, o, seen, 535.0)
    assert o4.since_join_failure == 0.0 and isinstance(next_step(spec(5), o4, again), a.Wait)


def test_a_removal_tried_again_is_announced_with_the_same_count():
    o = answering_learner(applied=2_100, committed=9_000, unhealthy_for=61)
    first = next_step(spec(5), o)
    after_first = recorded(learner_joins=learners.next_record(RECORDED.learner_joins, first, NOW))
    again = next_step(spec(5), o, after_first)
    assert "(failure 1 in a row)" in first.reason and "(failure 1 in a row)" in again.reason


def test_the_record_round_trips_through_status_and_a_malformed_one_is_ignored():
    record = JoinRecord(2, 1_700_000_000.0, 0xABC, "learner c-3 did not catch up")
    assert JoinRecord.from_dict(record.to_dict()) == record
    assert JoinRecord().to_dict() is None
    assert JoinRecord.from_dict({"failures": 2, "lastFailureAt": "yesterday"}) == JoinRecord()


def test_decide_writes_the_record_and_the_condition():
    o = answering_learner(applied=2_100, committed=9_000, unhealthy_for=61)
    decision = plan(spec(5), RECORDED, o, NOW)
    assert isinstance(decision.action, a.RemoveMember)
    assert decision.status_fields()["learnerJoins"]["failures"] == 1
    joining = next(cond for cond in decision.conditions if cond.type == "LearnerJoining")
    assert joining.reason == "NotCaughtUp"


def held_learner(
    leader_applied: int = 20_000, unhealthy_for: float = 10, pod_phase: str = "Running", listed_by_name: bool = True
):
    """Three voters and a learner that serves nothing. etcd 3.6 lists a learner held at its
    snapshot by name and client URLs (seen on the real nodes and against etcd itself): its
    first publish, forwarded before the snapshot, was applied by the others."""
    learner = dataclasses.replace(LEARNER, unhealthy_for=unhealthy_for, pod_phase=pod_phase, started=listed_by_name)
    return observed([M(0, applied=leader_applied), M(1), M(2), learner])


def test_a_learner_that_does_not_publish_from_a_snapshot_above_the_gap_gets_one_entry():
    o = held_learner()
    learner = next(m for m in o.etcd.members if m.is_learner)
    step = next_step(spec(5), o)
    assert isinstance(step, a.AppendEntryForLearner), step
    assert (step.member, step.member_id, step.peer_urls) == ("c-3", learner.id, learner.peer_urls)
    assert "has not served in 10s" in step.reason
    cond = condition(o)
    assert (cond.status, cond.reason) == (True, "LearnerUnreachable")
    assert cond.message == "learner c-3 does not answer: etcd serves clients only once its own publish has succeeded"
    # before its first publish is applied anywhere, it is listed without a name
    unlisted = next_step(spec(5), held_learner(listed_by_name=False))
    assert isinstance(unlisted, a.AppendEntryForLearner) and unlisted.member_id == learner.id


def test_no_entry_while_it_cannot_be_what_holds_the_learner():
    # the leader's applied index bounds any snapshot it sent: at or below the gap, nothing holds it
    assert isinstance(next_step(spec(5), held_learner(leader_applied=learners.MAX_APPLY_GAP)), a.WaitForLearner)
    # a learner that was just seen unhealthy has had no time to publish
    assert isinstance(next_step(spec(5), held_learner(unhealthy_for=learners.ENTRY_AFTER - 1)), a.WaitForLearner)
    # its etcd does not run yet
    assert isinstance(next_step(spec(5), held_learner(pod_phase="Pending")), a.WaitForLearner)


def test_a_learner_that_still_does_not_publish_is_removed_after_the_timeout():
    step = next_step(spec(5), held_learner(unhealthy_for=61))
    assert isinstance(step, a.RemoveMember) and step.learner_not_caught_up


def test_a_learner_gets_the_next_entry_only_after_entry_every_on_this_processs_clock():
    """Under load a held learner may stay unhealthy for a while: one entry per learner per
    ENTRY_EVERY, timed by the memory of the process that sent it."""
    o = held_learner()
    learner = next(m for m in o.etcd.members if m.is_learner)
    memory = learners.remember_entry({}, learner.id, 100.0)
    soon, memory = learners.carry_entries(o, memory, 100.0 + learners.ENTRY_EVERY - 1)
    assert isinstance(next_step(spec(5), soon), a.WaitForLearner)
    later, memory = learners.carry_entries(o, memory, 100.0 + learners.ENTRY_EVERY)
    assert isinstance(next_step(spec(5), later), a.AppendEntryForLearner)


def test_a_restarted_operator_sends_one_more_entry_then_keeps_the_pace():
    o = held_learner()
    learner = next(m for m in o.etcd.members if m.is_learner)
    fresh, memory = learners.carry_entries(o, {}, 5.0)  # a new process: no memory, whatever status says
    assert isinstance(next_step(spec(5), fresh), a.AppendEntryForLearner)
    memory = learners.remember_entry(memory, learner.id, 5.0)
    sent_at = []
    for second in range(6, 96):  # a pass a second, the learner still held
        seen, memory = learners.carry_entries(o, memory, float(second))
        step = next_step(spec(5), seen)
        if isinstance(step, a.AppendEntryForLearner):
            memory = learners.remember_entry(memory, learner.id, float(second))
            sent_at.append(second)
        else:
            assert isinstance(step, a.WaitForLearner), step
    assert sent_at == [35, 65, 95]
    # a learner that left the member list is forgotten
    _, memory = learners.carry_entries(held_learner(listed_by_name=True), {learner.id + 99: 95.0}, 96.0)
    assert memory == {}


class HeldLearnerObserver(ClusterObserver):
    """The observer's memory of entries sent, on a clock the test moves; what it sees is a
    held learner, pass after pass."""

    def __init__(self, seen):
        self.clock_now, self.seen = 0.0, seen
        self.clock = lambda: self.clock_now
        self.learner_entries, self.admissions, self.collisions = {}, {}, {}

    async def observe(self, body, status, children=None, live_secrets=True):
        observed, self.learner_entries = learners.carry_entries(self.seen, self.learner_entries, self.clock())
        return observed


class LeaderClient:
    def __init__(self):
        self.updates: list[int] = []

    def get(self, endpoint):
        return self

    async def update_peer_urls(self, member_id, peer_urls):
        self.updates.append(member_id)


def test_the_reconciler_remembers_each_entry_it_sends_and_the_next_waits():
    cluster_spec = {"size": 5, "recovery": {"memberUnhealthyTimeout": "60s", "quorumLossTimeout": "30s"}}
    desired = builders.pod_spec_hash(ClusterSpec.from_dict(cluster_spec))
    seen = held_learner()
    seen = dataclasses.replace(seen, pods={n: dataclasses.replace(p, spec_hash=desired) for n, p in seen.pods.items()})
    body = {
        "metadata": {"name": seen.cluster, "namespace": seen.namespace, "uid": "uid-c", "generation": 1},
        "spec": cluster_spec,
        "status": {"clusterID": "1"},
    }
    leader = LeaderClient()
    reconciler = ClusterReconciler(RecordingKube(), leader, lambda *_: None)  # type: ignore[arg-type]
    reconciler.observer = observer = HeldLearnerObserver(seen)
    reconciler.member_metrics = MemberMetricsWatcher(fetch=lambda url, timeout: asyncio.sleep(0, ""))
    for second in (0.0, 1.0, 2.0, 29.0, 30.0, 31.0):
        observer.clock_now = second
        reconciler.next_resync = float("inf")
        asyncio.run(reconciler.reconcile(body))
    learner_id = next(m.id for m in seen.etcd.members if m.is_learner)
    assert leader.updates == [learner_id, learner_id]  # at 0 s and at 30 s
