"""Which member answers belong to this cluster. Pure.

Once a cluster ID is recorded in status, an answer carrying another ID comes from a foreign
etcd (an address reused by another cluster's pod, or a member restarted into a new cluster):
it is never used for the member list, health or deletions."""

from __future__ import annotations

from etcd_operator.core.cluster.observed import MemberStatus


def parse_hex_id(text: str | None) -> int | None:
    """A member or cluster ID as status and annotations write it (hex); None if absent or bad."""
    try:
        return int(text, 16) if text else None
    except ValueError:
        return None


def split_foreign(
    answers: dict[str, MemberStatus], recorded: int | None
) -> tuple[dict[str, MemberStatus], dict[str, int]]:
    """(answers of this cluster, {endpoint: foreign cluster ID}). Before a cluster ID is
    recorded, answers that disagree with each other are all kept; the planner acts only on
    the leader's view then."""
    if recorded is None:
        return dict(answers), {}
    ours = {e: s for e, s in answers.items() if s.cluster_id == recorded}
    foreign = {e: s.cluster_id for e, s in answers.items() if s.cluster_id != recorded}
    return ours, foreign


def member_list_sources(answers: dict[str, MemberStatus]) -> list[str]:
    """Endpoints to ask for the member list: members that lead first, then by raft index."""
    leaders = [e for e, s in answers.items() if s.leader_id and s.leader_id == s.member_id]
    others = sorted((e for e in answers if e not in leaders), key=lambda e: -answers[e].raft_index)
    return leaders + others
