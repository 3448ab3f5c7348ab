"""Which member a snapshot is taken from, decided from what each candidate answered to a
Status call just before the run. Pure.

Invariants, each covered by tests/unit/test_backup_source.py:
- only a member that answers with the EtcdCluster's recorded ID (status.clusterID) is ever
  chosen; a member answering for another cluster (an address reused by another cluster's
  pod, a member restarted into a new cluster) is skipped, never snapshotted;
- with no recorded ID there is no evidence of which cluster is ours: nothing is chosen;
- learners and members that know no leader are not chosen; a follower is preferred, so the
  leader is spared, and the leader is chosen only when no follower answers;
- except while writes are fenced (core/hibernation.writes_fenced: a cluster going to sleep
  with fewer members left than a quorum), for a continuous writer: then no member knows a
  leader for long, what they hold is final, and the one with the highest revision is chosen;
- when nothing can be chosen, the reason names what was seen: ClusterIDMismatch (with
  every foreign ID and the recorded one), ClusterIDUnknown, or NoHealthyMember."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

CLUSTER_ID_MISMATCH = "ClusterIDMismatch"
CLUSTER_ID_UNKNOWN = "ClusterIDUnknown"
NO_HEALTHY_MEMBER = "NoHealthyMember"


@dataclasses.dataclass(frozen=True)
class Candidate:
    name: str  # the member's pod
    endpoint: str  # host:port


@dataclasses.dataclass(frozen=True)
class Answer:
    """A candidate's Status answer (cluster_id set), or why it gave none (error)."""

    cluster_id: int | None = None
    member_id: int = 0
    leader_id: int = 0
    is_learner: bool = False
    error: str = ""
    revision: int = 0  # the member's own (serializable) revision


@dataclasses.dataclass(frozen=True)
class SourceMember:
    name: str
    endpoint: str
    role: str
    cluster_id: int  # the ID it answered with: the recorded one


@dataclasses.dataclass(frozen=True)
class Refusal:
    reason: str
    message: str


def choose_source(
    candidates: list[Candidate], answers: Mapping[str, Answer], recorded_cluster_id: int | None, fenced: bool = False
) -> SourceMember | Refusal:
    if recorded_cluster_id is None:
        return Refusal(
            CLUSTER_ID_UNKNOWN,
            "the EtcdCluster has no status.clusterID recorded: no member can be "
            "shown to belong to it, so no snapshot is taken",
        )
    ours: list[tuple[int, SourceMember]] = []
    foreign = []
    for candidate in candidates:
        answer = answers.get(candidate.name) or Answer(error="not asked")
        if answer.cluster_id is None:
            continue
        if answer.cluster_id != recorded_cluster_id:
            foreign.append(f"{candidate.name} answered for cluster {answer.cluster_id:x}")
        elif (answer.leader_id or fenced) and not answer.is_learner:
            role = "leader" if answer.leader_id == answer.member_id else "follower" if answer.leader_id else "fenced"
            ours.append((answer.revision, SourceMember(candidate.name, candidate.endpoint, role, answer.cluster_id)))
    if ours and fenced:
        return min(ours, key=lambda o: (-o[0], o[1].name))[1]
    if ours:
        return min((m for _, m in ours), key=lambda m: (m.role != "follower", m.name))
    if foreign:
        return Refusal(
            CLUSTER_ID_MISMATCH,
            f"{'; '.join(foreign)}, not the EtcdCluster's status.clusterID {recorded_cluster_id:x}; "
            f"no snapshot is taken from another cluster",
        )
    unanswered = [f"{c.name}: {_why_not(answers.get(c.name) or Answer(error='not asked'))}" for c in candidates]
    return Refusal(
        NO_HEALTHY_MEMBER,
        "no member answered as a voter with a leader"
        + (f" ({'; '.join(unanswered)})" if unanswered else " (no member pod has an address)"),
    )


def _why_not(answer: Answer) -> str:
    if answer.cluster_id is None:
        return answer.error or "no answer"
    return "a learner" if answer.is_learner else "knows no leader"
