"""Which member a backup snapshots: only one that answers with the cluster's recorded ID. Pure."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from etcd_operator.controllers.backup.source_candidates import rank_candidates
from etcd_operator.core.backup.source_choice import (
    CLUSTER_ID_MISMATCH,
    CLUSTER_ID_UNKNOWN,
    NO_HEALTHY_MEMBER,
    Answer,
    Candidate,
    Refusal,
    SourceMember,
    choose_source,
)

OURS, OTHER = 0xA1, 0xB2
CANDIDATES = [
    Candidate("db-0", "10.0.0.1:2379"),
    Candidate("db-1", "10.0.0.2:2379"),
    Candidate("db-2", "10.0.0.3:2379"),
]


def leader(member_id: int, cluster_id: int = OURS) -> Answer:
    return Answer(cluster_id, member_id, member_id)


def follower(member_id: int, cluster_id: int = OURS) -> Answer:
    return Answer(cluster_id, member_id, 99)


def test_a_follower_of_this_cluster_is_chosen_and_the_leader_spared():
    choice = choose_source(CANDIDATES, {"db-0": leader(1), "db-1": follower(2), "db-2": follower(3)}, OURS)
    assert choice == SourceMember("db-1", "10.0.0.2:2379", "follower", OURS)
    assert choose_source(CANDIDATES, {"db-0": leader(1)}, OURS).name == "db-0"


def test_a_member_answering_for_another_cluster_is_skipped():
    choice = choose_source(CANDIDATES, {"db-0": follower(1, OTHER), "db-1": leader(2), "db-2": Answer(error="x")}, OURS)
    assert isinstance(choice, SourceMember) and choice.name == "db-1"


def test_when_only_another_cluster_answers_the_refusal_names_both_ids():
    choice = choose_source(CANDIDATES, {"db-0": leader(1, OTHER), "db-1": follower(2, OTHER)}, OURS)
    assert isinstance(choice, Refusal) and choice.reason == CLUSTER_ID_MISMATCH
    assert f"{OTHER:x}" in choice.message and f"{OURS:x}" in choice.message and "db-0" in choice.message


def test_without_a_recorded_id_nothing_is_chosen():
    choice = choose_source(CANDIDATES, {"db-0": leader(1)}, None)
    assert isinstance(choice, Refusal) and choice.reason == CLUSTER_ID_UNKNOWN


def test_learners_and_leaderless_members_are_not_chosen():
    answers = {"db-0": Answer(OURS, 1, 2, is_learner=True), "db-1": Answer(OURS, 2, 0), "db-2": Answer(error="down")}
    choice = choose_source(CANDIDATES, answers, OURS)
    assert isinstance(choice, Refusal) and choice.reason == NO_HEALTHY_MEMBER
    assert (
        "db-0: a learner" in choice.message and "db-1: knows no leader" in choice.message and "down" in choice.message
    )


def test_candidates_are_the_pods_with_an_address_followers_first():
    members = [{"name": "db-0", "role": "leader"}, {"name": "db-1", "role": "follower"}]
    ranked = rank_candidates(members, {"db-0": "10.0.0.1", "db-1": "10.0.0.2", "db-2": None, "db-3": "10.0.0.4"})
    assert [c.name for c in ranked] == ["db-1", "db-0", "db-3"]


ANSWERS = st.one_of(
    st.builds(Answer, error=st.just("down")),
    st.builds(Answer, st.sampled_from([OURS, OTHER]), st.integers(1, 3), st.integers(0, 3), st.booleans()),
)


@given(st.fixed_dictionaries({c.name: ANSWERS for c in CANDIDATES}))
def test_whatever_they_answer_only_a_voter_of_the_recorded_cluster_is_chosen(answers):
    choice = choose_source(CANDIDATES, answers, OURS)
    if isinstance(choice, SourceMember):
        answer = answers[choice.name]
        assert answer.cluster_id == OURS and choice.cluster_id == OURS
        assert answer.leader_id and not answer.is_learner
    else:
        assert choice.reason in (CLUSTER_ID_MISMATCH, NO_HEALTHY_MEMBER)
        if any(a.cluster_id == OTHER for a in answers.values()):
            assert choice.reason == CLUSTER_ID_MISMATCH


def test_with_writes_fenced_the_member_with_the_highest_revision_is_watched_leader_or_not():
    """A cluster going to sleep with fewer members left than a quorum: none knows a leader
    for long, and what they hold is final (core/hibernation.writes_fenced)."""
    answers = {
        "db-0": Answer(OURS, 1, 0, revision=140),
        "db-1": Answer(OURS, 2, 0, revision=138),
        "db-2": Answer(OURS, 3, 0, is_learner=True, revision=150),
    }
    assert isinstance(choose_source(CANDIDATES, answers, OURS), Refusal)
    choice = choose_source(CANDIDATES, answers, OURS, fenced=True)
    assert choice == SourceMember("db-0", "10.0.0.1:2379", "fenced", OURS)
    foreign = {"db-0": Answer(OTHER, 1, 0, revision=200), "db-1": Answer(OURS, 2, 0, revision=138)}
    assert choose_source(CANDIDATES, foreign, OURS, fenced=True).name == "db-1"
