"""The continuous backup's segment codec, its manifest, and the choice of what a
point-in-time restore replays (core/backup/segments.py, core/backup/chain.py)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from etcd_operator.core.backup.chain import CaughtUp, ChainProblem, Target, plan_replay, runs
from etcd_operator.core.backup.manifest import Manifest
from etcd_operator.core.backup.segments import (
    KeyChange,
    RevisionRecord,
    SegmentBody,
    SegmentCorrupt,
    SegmentManifest,
    chain_id,
    decode,
    encode,
    last_seen_by,
    revisions_of,
)
from tests.support.backup_manifests import segment_manifest, snapshot_manifest

changes = st.lists(
    st.builds(
        KeyChange,
        st.binary(min_size=1, max_size=20),
        st.one_of(st.none(), st.binary(max_size=50)),
        st.integers(0, 2**62),
    ),
    min_size=1,
    max_size=4,
)


@given(
    st.integers(1, 2**40),
    st.lists(changes, max_size=6),
    st.lists(st.tuples(st.integers(1, 2**62), st.integers(1, 10**6)), max_size=3),
)
def test_a_segment_decodes_to_what_was_encoded(first, per_revision, leases):
    records = tuple(RevisionRecord(first + i, 1_700_000_000.5 + i, tuple(c)) for i, c in enumerate(per_revision))
    body = SegmentBody(records, tuple(leases))
    assert decode(encode(body)) == body


def _body() -> bytes:
    return encode(
        SegmentBody(
            (
                RevisionRecord(11, 100.0, (KeyChange(b"/a", b"1"), KeyChange(b"/b", None))),
                RevisionRecord(12, 101.0, (KeyChange(b"/c", b"3", lease=7),)),
            ),
            ((7, 30),),
        )
    )


def test_a_truncated_segment_is_refused_at_every_length():
    data = _body()
    for length in range(len(data)):
        with pytest.raises(SegmentCorrupt):
            decode(data[:length])


def test_trailing_bytes_and_unknown_records_are_refused():
    data = _body()
    with pytest.raises(SegmentCorrupt):
        decode(data + b"x")
    with pytest.raises(SegmentCorrupt):
        decode(data.replace(b"\nL", b"\nZ", 1))


def test_revisions_must_follow_one_another():
    with pytest.raises(ValueError):
        encode(
            SegmentBody(
                (RevisionRecord(5, 0, (KeyChange(b"k", b"v"),)), RevisionRecord(7, 0, (KeyChange(b"k", b"v"),)))
            )
        )


def test_replay_filters_by_revision_and_by_time():
    body = decode(_body())
    assert [r.revision for r in revisions_of(body.revisions, after=11, up_to=12)] == [12]
    assert last_seen_by(body.revisions, 100.5).revision == 11
    assert last_seen_by(body.revisions, 99.0) is None


def _segment(
    chain: str, sequence: int, first: int, last: int, cluster: str = "c1", seen: float | None = None
) -> SegmentManifest:
    return segment_manifest(chain, sequence, first, last, cluster_id=cluster, seen=seen)


def _snapshot(revision: int, cluster: str = "c1", verified: bool | None = True) -> Manifest:
    return snapshot_manifest(revision, cluster_id=cluster, verified=verified)


def test_a_segment_manifest_round_trips_and_checks_its_bytes():
    segment = _segment("c1-1", 1, 2, 5)
    assert SegmentManifest.from_json(segment.to_json()) == segment
    assert segment.checks(b"abc") is None
    assert "sha256" in segment.checks(b"abd")
    assert "bytes" in segment.checks(b"abcd")
    with pytest.raises(ValueError):
        SegmentManifest.from_json(b'{"format": "x"}')


CHAIN = chain_id("c1", 10)


def test_the_newest_snapshot_at_or_before_the_revision_is_the_base():
    segments = [_segment(CHAIN, 1, 11, 20), _segment(CHAIN, 2, 21, 30), _segment(CHAIN, 3, 31, 40)]
    plan = plan_replay(Target(revision=33), [_snapshot(10), _snapshot(25), _snapshot(35)], segments)
    assert plan.base.revision == 25
    assert [s.sequence for s in plan.segments] == [2, 3]
    assert plan.up_to_revision == 33


def test_a_snapshot_at_the_exact_revision_needs_no_replay():
    plan = plan_replay(Target(revision=25), [_snapshot(10), _snapshot(25)], [_segment(CHAIN, 1, 11, 30)])
    assert plan.base.revision == 25 and not plan.replays


def test_a_snapshot_that_failed_verification_is_never_a_base():
    segments = [_segment(CHAIN, 1, 11, 40)]
    plan = plan_replay(Target(revision=33), [_snapshot(10), _snapshot(25, verified=False)], segments)
    assert plan.base.revision == 10


def test_a_gap_breaks_the_chain_and_the_restore_says_where():
    segments = [_segment(CHAIN, 1, 11, 20), _segment(CHAIN, 3, 31, 40)]
    assert [(r.first, r.last) for r in runs(segments)] == [(11, 20), (31, 40)]
    with pytest.raises(ChainProblem, match="chain is broken"):
        plan_replay(Target(revision=25), [_snapshot(10)], segments)
    with pytest.raises(ChainProblem, match="no usable full snapshot"):
        plan_replay(Target(revision=35), [_snapshot(10)], segments)
    assert plan_replay(Target(revision=35), [_snapshot(10), _snapshot(30)], segments).base.revision == 30


def test_a_missing_revision_inside_consecutive_numbers_breaks_the_run():
    assert len(runs([_segment(CHAIN, 1, 11, 20), _segment(CHAIN, 2, 22, 30)])) == 2


def test_another_clusters_snapshot_is_never_a_base():
    with pytest.raises(ChainProblem):
        plan_replay(Target(revision=15), [_snapshot(10, cluster="other")], [_segment(CHAIN, 1, 11, 20)])


def test_the_latest_reaches_furthest():
    older = chain_id("c1", 5)
    segments = [_segment(older, 1, 6, 12), _segment(CHAIN, 1, 11, 20), _segment(CHAIN, 2, 21, 29)]
    plan = plan_replay(Target(), [_snapshot(5), _snapshot(10)], segments)
    assert plan.base.revision == 10 and plan.up_to_revision == 29
    with pytest.raises(ChainProblem, match="newer than the newest"):
        plan_replay(Target(revision=30), [_snapshot(5), _snapshot(10)], segments)


def test_a_time_target_replays_up_to_the_segment_started_by_then():
    segments = [_segment(CHAIN, 1, 11, 20, seen=1000.0), _segment(CHAIN, 2, 21, 30, seen=2000.0)]
    plan = plan_replay(Target(time=1500.0), [_snapshot(10)], segments)
    assert [s.sequence for s in plan.segments] == [1] and plan.until_time == 1500.0
    plan = plan_replay(Target(time=2005.0), [_snapshot(10), _snapshot(25)], segments)
    # the base must precede the segment that holds the point: 25 is inside it
    assert plan.base.revision == 10 and [s.sequence for s in plan.segments] == [1, 2]
    with pytest.raises(ChainProblem):
        plan_replay(Target(time=999.0), [_snapshot(10)], segments)


def _of(chain: str, sequence: int, first: int, last: int) -> SegmentManifest:
    return segment_manifest(chain, sequence, first, last, base_revision=int(chain.rsplit("-", 1)[1]))


def test_of_two_manifests_under_one_sequence_the_reader_takes_the_one_that_follows_its_predecessor():
    """Two writers raced for segment 2 of a chain: one manifest starts where segment 1 ended,
    the other does not (a writer that resumed from a stale view). The chain stays usable,
    through the consistent one."""
    consistent = [_of(CHAIN, 1, 11, 20), _of(CHAIN, 2, 21, 30), _of(CHAIN, 3, 31, 40)]
    stray = _of(CHAIN, 2, 25, 33)
    found = runs([*consistent, stray])
    assert [r.segments for r in found] == [tuple(consistent)]
    plan = plan_replay(Target(), [_snapshot(10)], [stray, *consistent])
    assert plan.up_to_revision == 40 and plan.segments == tuple(consistent)


def test_of_two_consistent_manifests_under_one_sequence_the_one_the_chain_goes_on_from_is_taken():
    """Both start where segment 1 ended (one writer cut at 30, the other at 28); the chain
    went on after the first: that one is taken, whichever order they are listed in."""
    kept = [_of(CHAIN, 1, 11, 20), _of(CHAIN, 2, 21, 30), _of(CHAIN, 3, 31, 40)]
    shorter = _of(CHAIN, 2, 21, 28)
    for listed in ([*kept, shorter], [shorter, *reversed(kept)]):
        assert [r.segments for r in runs(listed)] == [tuple(kept)]


def test_a_duplicate_in_one_chain_never_blocks_another_chain():
    newer = chain_id("c1", 40)
    segments = [_of(CHAIN, 1, 11, 20), _of(CHAIN, 1, 11, 22), _of(CHAIN, 2, 21, 40), _of(newer, 1, 41, 50)]
    plan = plan_replay(Target(revision=45), [_snapshot(10), _snapshot(40)], segments)
    assert plan.base.revision == 40 and [s.chain for s in plan.segments] == [newer]
    assert plan_replay(Target(revision=35), [_snapshot(10)], segments).up_to_revision == 35


def test_a_writer_whose_clock_ran_slow_never_brings_a_write_after_the_time_into_the_restore():
    # Writer A stamps segments 1-2 on time (revision 24 at 2003, 25 at 2004); writer B, which
    # took the chain over with a clock 1,000 s slow, stamps segment 3 (31..40) at 1010...
    segments = [
        _segment(CHAIN, 1, 11, 20, seen=1000.0),
        _segment(CHAIN, 2, 21, 30, seen=2000.0),
        _segment(CHAIN, 3, 31, 40, seen=1010.0),
    ]
    plan = plan_replay(Target(time=2003.5), [_snapshot(10), _snapshot(30), _snapshot(35)], segments)
    # ... which makes neither its segment nor a snapshot after revision 24 part of a restore
    # to 2003.5: the base precedes segment 2, and the replay stops by revision 29 at the latest.
    assert plan.base.revision == 10 and [s.sequence for s in plan.segments] == [1, 2]
    assert plan.up_to_revision == 29 and plan.until_time == 2003.5


def test_a_base_of_another_chain_never_holds_a_revision_stamped_after_the_time_inside_a_segment():
    """Found by the skewed-clock simulator (seed 2): the old chain's writer stamps its segment
    37..47 at 1000 (revision 37) to 1004.5 (47), and inside it 39 at 1001.5. The new chain,
    from a full snapshot at revision 43, has a writer whose clock runs two minutes slow: its
    stamps (of 44..46 at 878) are all before a restore to 1000. Its base at 43 holds revision
    39, stamped after the time; the manifests show only the old segment's ends. Any revision
    after 37 may be one of those, so no other chain's base after 37 is taken: the restore
    replays the old segment from the base before, cut by its own per-revision stamps."""
    old, new = chain_id("c1", 1), chain_id("c1", 43)
    segments = [
        dataclasses.replace(_segment(old, 7, 37, 47, seen=1000.0), last_seen_at=1004.5),
        dataclasses.replace(_segment(new, 1, 44, 46, seen=878.0), last_seen_at=878.0),
        _segment(new, 2, 47, 50, seen=883.0),
        *[_segment(old, n, 1 + 6 * (n - 1), 6 * n, seen=900.0 + n) for n in range(1, 7)],
    ]
    plan = plan_replay(Target(time=1000.0), [_snapshot(1), _snapshot(43)], segments)
    assert plan.base.revision == 1 and {s.chain for s in plan.segments} == {old} and plan.until_time == 1000.0
    assert plan.up_to_revision == 46  # the bound by the ends; the replay stops at 39, stamped 1001.5


def test_a_time_the_backup_did_not_see_past_is_not_reachable():
    segments = [_segment(CHAIN, 1, 11, 20, seen=1000.0), _segment(CHAIN, 2, 21, 30, seen=2000.0)]
    with pytest.raises(ChainProblem, match="no revision backed up was seen after that time"):
        plan_replay(Target(time=5000.0), [_snapshot(10)], segments)  # the future, or a writer that stopped
    broken = [_segment(CHAIN, 1, 11, 20, seen=1000.0), _segment(CHAIN, 3, 31, 40, seen=3000.0)]
    with pytest.raises(ChainProblem, match="revision 30, the last seen by that time, is in no stored segment"):
        plan_replay(Target(time=2500.0), [_snapshot(10), _snapshot(25)], broken)  # inside the break
    assert plan_replay(Target(time=3005.0), [_snapshot(10), _snapshot(30)], broken).base.revision == 30


def test_a_record_of_the_writer_holding_the_whole_cluster_at_or_after_the_time_is_evidence():
    """A quiet cluster writes no segment: the writer's record (a linearizable read sent at 1500
    found the cluster at revision 30, which the chain held) covers every time up to 1500."""
    segments = [_segment(CHAIN, 1, 11, 20, seen=1000.0), _segment(CHAIN, 2, 21, 30, seen=1100.0)]
    caught_up = [CaughtUp(CHAIN, 30, 1500.0)]
    plan = plan_replay(Target(time=1400.0), [_snapshot(10)], segments, caught_up)
    assert plan.up_to_revision == 30 and [s.sequence for s in plan.segments] == [1, 2]
    for late_or_other in ([CaughtUp(CHAIN, 30, 1300.0)], [CaughtUp(chain_id("c1", 5), 30, 1500.0)]):
        with pytest.raises(ChainProblem, match="no revision backed up was seen after that time"):
            plan_replay(Target(time=1400.0), [_snapshot(10)], segments, late_or_other)
