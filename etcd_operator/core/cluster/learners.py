"""How a joining learner is doing, from its own answers, and how long to wait before adding
another one after a learner did not catch up. Pure.

A learner that was added answers Status with its own committed and applied raft indexes. It
serves no request until it has published itself to the cluster (its name is then in the
member list), and etcd refuses every request of a member whose committed index runs more
than MAX_APPLY_GAP entries ahead of its applied index, its own publish included
("etcdserver: too many requests"). The condition says which of these holds.

A learner that joins by the leader's snapshot can be held there for good. etcd 3.6 applies
the snapshot without moving the applied index that this check reads (server.go
applySnapshot; only an applied entry moves it), while its committed index jumps to the
snapshot's. From a snapshot taken above MAX_APPLY_GAP, its publish is refused until an
entry committed after the snapshot is applied, and its client port stays shut: the cluster
grows only while clients write. A CA rotation showed it, because the clients still holding
the old CA stopped writing. So a learner that does not answer a while after its pod runs
gets one entry: the operator updates it to the peer URLs it has (ENTRY_AFTER), at most
once per ENTRY_EVERY per learner. The time of the last one is this process's memory on its
monotonic clock (carry_entries), never read from status: a restarted or newly elected
operator may send one more at once, then keeps the pace.

A learner removed because it did not catch up is counted in status.learnerJoins. The next
add waits JOIN_BACKOFF doubled for each failure in a row, up to JOIN_BACKOFF_MAX, so a
learner that cannot join is not added and removed in a tight loop. The wait is timed on the
acting process's own monotonic clock from the first pass in which it saw the failure
(cluster/timers.py), never from the time in status: a restarted or newly elected operator
waits the full backoff again. A promoted learner clears the count."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from etcd_operator.core import conditions as c
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.health import Health, member_name
from etcd_operator.core.cluster.observed import Member, Observed
from etcd_operator.core.cluster.recorded import JoinRecord

MAX_APPLY_GAP = 5000  # etcd's maxGapBetweenApplyAndCommitIndex
# A learner that has not published this long after it was seen unhealthy gets one entry;
# a learner that can publish does so within a second of applying the snapshot.
ENTRY_AFTER = 5.0
# One entry is enough once applied; a learner still catching up under load gets the next no sooner.
ENTRY_EVERY = 30.0
JOIN_BACKOFF = 30.0
JOIN_BACKOFF_MAX = 600.0


def join_backoff(failures: int) -> float:
    return min(JOIN_BACKOFF * 2.0 ** max(failures - 1, 0), JOIN_BACKOFF_MAX)


@dataclasses.dataclass(frozen=True)
class Progress:
    name: str
    answers: bool
    published: bool
    applied: int | None = None  # the learner's own applied index
    committed: int | None = None  # the learner's own committed index
    leader_committed: int | None = None
    error: str = ""  # why it does not answer

    @property
    def behind(self) -> int | None:
        if self.applied is None or self.leader_committed is None:
            return None
        return max(self.leader_committed - self.applied, 0)

    @property
    def refuses_requests(self) -> bool:
        return self.applied is not None and self.committed is not None and self.committed - self.applied > MAX_APPLY_GAP

    def describe(self) -> str:
        if not self.answers:
            return (
                f"learner {self.name} does not answer"
                + (f" ({self.error})" if self.error else "")
                + ": etcd serves clients only once its own publish has succeeded"
            )
        parts = [f"learner {self.name} has applied index {self.applied}"]
        if self.leader_committed is not None:
            parts[0] += f" of the leader's {self.leader_committed} ({self.behind} behind)"
        if self.refuses_requests and self.committed is not None and self.applied is not None:
            parts.append(
                f"its committed index {self.committed} runs {self.committed - self.applied} entries ahead "
                f"of its applied index, over etcd's {MAX_APPLY_GAP}, so it refuses requests "
                f"(etcdserver: too many requests), its own publish included"
            )
        if not self.published:
            parts.append("it has not published itself to the cluster yet")
        return "; ".join(parts)


def progress(observed: Observed, learner: Member) -> Progress:
    name = member_name(observed, learner) or learner.hex_id
    own = observed.etcd.statuses.get(learner.id)
    leader = observed.etcd.statuses.get(observed.etcd.leader_id) if observed.etcd.leader_id else None
    published = bool(learner.name)
    if own is None:
        return Progress(name, False, published, error=observed.etcd.errors.get(name, ""))
    return Progress(
        name, True, published, own.raft_applied_index, own.raft_index, leader.raft_index if leader is not None else None
    )


def needs_an_entry(observed: Observed, learner: Member) -> bool:
    """True while a learner may be held at its snapshot (see the module's docstring): it does
    not answer, its pod runs, it has been unhealthy ENTRY_AFTER, and the leader has applied
    more than MAX_APPLY_GAP entries (a snapshot is taken at the sender's applied index, so a
    leader below the gap sends none that can hold a learner). Its name in the member list
    says nothing here: the first publish, forwarded before the snapshot, is often applied by
    the others while the learner itself, timed out waiting, keeps retrying."""
    name = member_name(observed, learner)
    if name is None or learner.id in observed.etcd.statuses:
        return False
    pod = observed.pods.get(name)
    if pod is None or pod.phase != "Running" or pod.deleting:
        return False
    leader = observed.etcd.statuses.get(observed.etcd.leader_id) if observed.etcd.leader_id else None
    if leader is None or leader.raft_applied_index <= MAX_APPLY_GAP:
        return False
    return (observed.unhealthy_for.get(name) or 0.0) >= ENTRY_AFTER


def entry_for(observed: Observed, learner: Member, name: str, how: str) -> a.AppendEntryForLearner | None:
    if not needs_an_entry(observed, learner):
        return None
    since_last = observed.since_learner_entry.get(learner.id)
    if since_last is not None and since_last < ENTRY_EVERY:
        return None
    waited = observed.unhealthy_for.get(name) or 0.0
    return a.AppendEntryForLearner(
        f"learner {name} has not served in {waited:.0f}s: {how}; an entry after its snapshot "
        f"lets it (etcd moves its applied index only on an entry)",
        name,
        learner.id,
        learner.peer_urls,
    )


EntryMemory = Mapping[int, float]  # learner's member ID -> monotonic time this process sent it an entry


def remember_entry(memory: EntryMemory, member_id: int, monotonic_now: float) -> dict[int, float]:
    """The memory once an entry is sent to `member_id` (recorded as it is sent, so that one
    that fails is paced too)."""
    return {**memory, member_id: monotonic_now}


def carry_entries(observed: Observed, memory: EntryMemory, monotonic_now: float) -> tuple[Observed, dict[int, float]]:
    """`observed.since_learner_entry` (seconds, on this process's clock) for the learners
    still in the member list, and the memory kept for them. A reading from before the memory
    (a clock that went back) counts as no memory: one more entry, never a storm."""
    learner_ids = {m.id for m in observed.etcd.members if m.is_learner}
    kept = {i: at for i, at in memory.items() if i in learner_ids and 0.0 <= monotonic_now - at <= ENTRY_EVERY}
    since = {i: monotonic_now - at for i, at in kept.items()}
    return dataclasses.replace(observed, since_learner_entry=since), kept


def failures_after_removing(record: JoinRecord, member_id: int) -> int:
    """The count once this learner is removed: a removal tried again counts once."""
    return record.failures if member_id == record.last_member_id else record.failures + 1


def add_backoff(record: JoinRecord, observed: Observed) -> a.Wait | None:
    """A wait before adding a member while the last learner's failure is recent. A failure
    in status that this process has not timed yet (no sighting) is waited for in full."""
    if not record.failures:
        return None
    backoff, waited = join_backoff(record.failures), observed.since_join_failure or 0.0
    if waited >= backoff:
        return None
    return a.Wait(
        f"{record.failures} learner(s) in a row did not catch up (last: {record.last_reason}); the next "
        f"member is added in {backoff - waited:.0f}s"
    )


def next_record(record: JoinRecord, action: a.Step, now: float) -> JoinRecord:
    if isinstance(action, a.PromoteLearner):
        return JoinRecord()
    if (
        isinstance(action, a.RemoveMember)
        and action.learner_not_caught_up
        and action.member_id != record.last_member_id
    ):
        return JoinRecord(failures_after_removing(record, action.member_id), now, action.member_id, action.reason)
    return record


def condition(record: JoinRecord, observed: Observed, health: Health, action: a.Step) -> c.Condition:
    """LearnerJoining: True while a learner joins, with how far it is; False otherwise, with
    the backoff when the last learner did not catch up."""
    for learner in health.learners:
        found = progress(observed, learner)
        reason = "CatchingUp"
        if not found.answers:
            reason = "LearnerUnreachable"
        elif found.refuses_requests:
            reason = "TooFarBehind"
        if isinstance(action, a.RemoveMember) and action.member_id == learner.id:
            reason = "NotCaughtUp"
        return c.Condition("LearnerJoining", True, reason, found.describe())
    wait = add_backoff(record, observed)
    if wait is not None:
        return c.Condition("LearnerJoining", False, "BackingOff", wait.reason)
    return c.Condition("LearnerJoining", False, "NoLearner", "")
