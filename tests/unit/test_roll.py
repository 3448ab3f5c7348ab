"""Health-gated rolls with automatic rollback (cluster/roll.py), through the whole pure pass
(decision.plan), and the version table (versions.py)."""

from __future__ import annotations

import dataclasses

import pytest

from etcd_operator.core import versions
from etcd_operator.core.cluster import builders, roll
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.recorded import RollRecord
from etcd_operator.core.cluster.spec import ClusterSpec
from tests.unit.cluster_scenarios import M, decide_accepting, observed, recorded

# An explicit quota below what the volume holds: the acting spec keeps it, so the pods'
# hashes below are the ones the planner expects (a derived quota would enter the hash).
OLD = {
    "size": 3,
    "version": "3.6.16",
    "recovery": {"memberUnhealthyTimeout": "60s"},
    "etcd": {"quotaBackendBytes": 128 * 1024 * 1024},
}
BAD = {**OLD, "repository": "registry.invalid/etcd"}


def hash_of(raw: dict) -> str:
    return builders.pod_spec_hash(ClusterSpec.from_dict(raw))


def world(members: list[M], rolled: set[int], record: RollRecord, new=BAD, old=OLD, **kw):
    """Pods of `rolled` ordinals run the `new` pod spec, the others the `old` one; status
    records `record`."""
    o = observed(members, **kw)
    pods = {
        name: dataclasses.replace(p, spec_hash=hash_of(new) if int(name.rsplit("-", 1)[1]) in rolled else hash_of(old))
        for name, p in o.pods.items()
    }
    return dataclasses.replace(o, pods=pods), recorded(rollout=record)


LAST_GOOD = RollRecord(last_good_spec=OLD)
FAILED = dataclasses.replace(LAST_GOOD, failed_hash=hash_of(BAD), failed_member="c-2", failed_reason="bad image")


def test_a_broken_rolled_member_fails_the_roll():
    o, st = world([M(0), M(1), M(2, healthy=False, waiting="ImagePullBackOff", unhealthy_for=5)], {2}, LAST_GOOD)
    d = decide_accepting(ClusterSpec.from_dict(BAD), o, BAD, st)
    assert isinstance(d.action, a.RollFailed) and d.action.member == "c-2"
    assert d.rollout.failed_hash == hash_of(BAD)
    assert next(c for c in d.conditions if c.type == "RollPaused").status is True


def test_a_failed_roll_rolls_the_member_back_on_its_data_never_replaces_it():
    # Unhealthy far longer than memberUnhealthyTimeout: still rolled back, not replaced.
    o, st = world([M(0), M(1), M(2, healthy=False, waiting="ImagePullBackOff", unhealthy_for=3600)], {2}, FAILED)
    d = decide_accepting(ClusterSpec.from_dict(BAD), o, BAD, st)
    assert d.acting_spec.image == ClusterSpec.from_dict(OLD).image
    assert isinstance(d.action, a.RollMember) and d.action.member == "c-2"
    cond = next(c for c in d.conditions if c.type == "RollPaused")
    assert cond.status is True and cond.reason == "RolledBack"


def test_a_rolled_back_roll_leaves_a_ready_member_it_cannot_reach_alone():
    # c-0 still runs the failed spec, serves and leads (the others report it as their
    # leader), but the operator is cut off from it: no evidence that it does not serve.
    o, st = world([M(0), M(1), M(2)], {0}, FAILED, reachable={1, 2})
    d = decide_accepting(ClusterSpec.from_dict(BAD), o, BAD, st)
    assert not (isinstance(d.action, a.RollMember) and d.action.member == "c-0"), d.action
    # Once its pod is not ready either, it is rolled back.
    o, st = world([M(0, pod_ready=False), M(1), M(2)], {0}, FAILED, reachable={1, 2})
    d = decide_accepting(ClusterSpec.from_dict(BAD), o, BAD, st)
    assert isinstance(d.action, a.RollMember) and d.action.member == "c-0", d.action


def test_a_rolled_member_that_runs_but_does_not_serve_is_waited_for_not_replaced():
    # Running, not broken, unhealthy longer than memberUnhealthyTimeout (60 s) but inside
    # the roll deadline: the roll waits; no member is removed.
    o, st = world([M(0), M(1), M(2, healthy=False, unhealthy_for=120, pod_ready=False)], {2}, LAST_GOOD)
    d = decide_accepting(ClusterSpec.from_dict(BAD), o, BAD, st)
    assert isinstance(d.action, a.Wait), d.action
    assert "rolled member c-2" in d.action.reason


def test_past_the_deadline_the_roll_fails_and_the_member_goes_back():
    o, st = world(
        [M(0), M(1), M(2, healthy=False, unhealthy_for=roll.ROLL_DEADLINE + 1, pod_ready=False)], {2}, LAST_GOOD
    )
    d = decide_accepting(ClusterSpec.from_dict(BAD), o, BAD, st)
    assert isinstance(d.action, a.RollFailed)
    st2 = recorded(rollout=d.rollout)
    d2 = decide_accepting(ClusterSpec.from_dict(BAD), o, BAD, st2)
    assert isinstance(d2.action, a.RollMember) and d2.action.member == "c-2"


def test_the_next_member_waits_until_the_rolled_one_caught_up():
    o, st = world([M(0, applied=50_000), M(1), M(2, applied=100)], {2}, LAST_GOOD)
    d = decide_accepting(ClusterSpec.from_dict(BAD), o, BAD, st)
    assert isinstance(d.action, a.Wait) and "trails the leader" in d.action.reason
    caught_up, st = world([M(0, applied=500), M(1), M(2, applied=450)], {2}, LAST_GOOD)
    assert isinstance(decide_accepting(ClusterSpec.from_dict(BAD), caught_up, BAD, st).action, a.RollMember)


def test_size_one_broken_roll_fails_and_restarts_on_the_last_good_spec():
    members = [M(0, healthy=False, waiting="ImagePullBackOff")]
    o, st = world(members, {0}, LAST_GOOD, new={**BAD, "size": 1}, old={**OLD, "size": 1}, leader=None)
    record = RollRecord(last_good_spec={**OLD, "size": 1})
    st = recorded(rollout=record)
    d = decide_accepting(ClusterSpec.from_dict({**BAD, "size": 1}), o, {**BAD, "size": 1}, st)
    assert isinstance(d.action, a.RollFailed)
    d2 = decide_accepting(ClusterSpec.from_dict({**BAD, "size": 1}), o, {**BAD, "size": 1}, recorded(rollout=d.rollout))
    assert isinstance(d2.action, a.RollMember) and d2.action.member == "c-0"
    assert d2.acting_spec.image == ClusterSpec.from_dict(OLD).image


def test_size_one_user_revert_restarts_the_broken_pod():
    o, st = world(
        [M(0, healthy=False, waiting="ImagePullBackOff")],
        {0},
        RollRecord(),
        new={**BAD, "size": 1},
        old={**OLD, "size": 1},
        leader=None,
    )
    d = decide_accepting(ClusterSpec.from_dict({**OLD, "size": 1}), o, {**OLD, "size": 1}, st)
    assert isinstance(d.action, a.RollMember) and d.action.member == "c-0"


def test_a_revert_lifts_the_pause_and_a_settled_cluster_records_its_spec():
    o, st = world([M(0), M(1), M(2)], set(), FAILED)
    d = decide_accepting(ClusterSpec.from_dict(OLD), o, OLD, st)
    assert next(c for c in d.conditions if c.type == "RollPaused").status is False
    assert d.rollout == RollRecord(last_good_spec=OLD, last_good_hash=hash_of(OLD))
    assert RollRecord.from_dict(d.rollout.to_dict()) == d.rollout


def test_without_a_last_good_spec_rolls_are_not_gated():
    o, st = world([M(0), M(1), M(2, healthy=False, waiting="ImagePullBackOff", unhealthy_for=5)], {2}, RollRecord())
    assert not isinstance(decide_accepting(ClusterSpec.from_dict(BAD), o, BAD, st).action, a.RollFailed)


# --- the version table ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "version, reason",
    [
        ("3.5.0", "KnownBadVersion"),
        ("3.5.2", "KnownBadVersion"),
        ("3.4.30", "UnsupportedVersion"),
        ("3.5.3", None),
        ("3.5.21", None),
        ("3.6.0", None),
    ],
)
def test_release_table(version, reason):
    problem = versions.release_problem(version)
    assert (problem.reason if problem else None) == reason


@pytest.mark.parametrize(
    "running, wanted, refused",
    [
        ("3.5.21", "3.6.16", True),
        ("3.5.31", "3.6.0", True),
        ("3.5.32", "3.6.16", False),
        ("3.5.35", "3.6.16", False),
        ("3.5.21", "3.5.35", False),
        ("3.6.16", "3.6.17", False),
        (None, "3.6.16", False),
    ],
)
def test_minor_upgrade_gate(running, wanted, refused):
    problem = versions.upgrade_problem(running, wanted)
    assert bool(problem) is refused
    if problem:
        assert "3.5.32" in problem.message


def test_gate_keeps_the_running_version():
    o = dataclasses.replace(observed([M(0), M(1), M(2)]), running_version="3.5.21")
    d = decide_accepting(ClusterSpec.from_dict({**OLD, "version": "3.6.16"}), o)
    assert d.acting_spec.version == "3.5.21"
    accepted = next(c for c in d.conditions if c.type == "SpecAccepted")
    assert accepted.status is False and accepted.reason == "UpgradeNeedsPatch"


def test_version_skew():
    assert versions.skew(["3.5.35", "3.6.16"]) == {"clusterVersion": "3.5.0", "mixedVersions": True}
    assert versions.skew(["3.6.16", "3.6.16"]) == {"clusterVersion": "3.6.0", "mixedVersions": False}


def test_a_refused_downgrade_holds_while_no_member_answers():
    # An outage: nobody answers; the version last seen running still refuses the downgrade,
    # so a pod recreated now keeps 3.6.16.
    o, st = observed([M(0, healthy=False)], leader=None), recorded(recorded_version="3.6.16")
    assert o.running_version is None
    d = decide_accepting(ClusterSpec.from_dict({**OLD, "size": 1, "version": "3.5.21"}), o, st=st)
    assert d.acting_spec.version == "3.6.16"
    assert next(c for c in d.conditions if c.type == "SpecAccepted").reason == "VersionDowngrade"
    # A supported downgrade is not refused, but it waits for a healthy cluster all the same.
    d = decide_accepting(ClusterSpec.from_dict({**OLD, "size": 1, "version": "3.5.35"}), o, st=st)
    assert d.acting_spec.version == "3.6.16" and not isinstance(d.action, a.EnableDowngrade)


# --- downgrades through etcd's API ---------------------------------------------------------

DOWN = {**OLD, "version": "3.5.35"}


def test_a_downgrade_is_enabled_on_a_healthy_cluster_and_rolls_only_once_the_cluster_version_dropped():
    o = observed([M(0), M(1), M(2)])
    pods = {n: dataclasses.replace(p, spec_hash=hash_of(OLD)) for n, p in o.pods.items()}
    o, st = dataclasses.replace(o, pods=pods, cluster_version="3.6.0"), recorded(rollout=LAST_GOOD)
    d = decide_accepting(ClusterSpec.from_dict(DOWN), o, DOWN, st)
    assert isinstance(d.action, a.EnableDowngrade) and d.action.target == "3.5"
    assert d.acting_spec.version == "3.6.16"
    enabled = dataclasses.replace(st, downgrade_target="3.5")
    d = decide_accepting(ClusterSpec.from_dict(DOWN), o, DOWN, enabled)
    assert isinstance(d.action, a.Wait) and "cluster version" in d.action.reason
    dropped = dataclasses.replace(o, cluster_version="3.5.0")
    d = decide_accepting(ClusterSpec.from_dict(DOWN), dropped, DOWN, enabled)
    assert d.acting_spec.version == "3.5.35"
    assert isinstance(d.action, a.RollMember) and d.action.member != "c-0"  # followers first; c-0 leads


def test_a_revert_mid_downgrade_cancels_it():
    o = dataclasses.replace(observed([M(0), M(1), M(2)]), cluster_version="3.5.0")
    d = decide_accepting(ClusterSpec.from_dict(OLD), o, OLD, recorded(downgrade_target="3.5"))
    assert isinstance(d.action, a.CancelDowngrade)


def test_a_downgrade_below_the_reupgrade_patch_is_refused():
    assert versions.downgrade_target("3.6.16", "3.5.31") is None
    assert versions.downgrade_target("3.6.16", "3.5.35") == "3.5"
    assert versions.downgrade_target("3.5.35", "3.5.21") is None


@pytest.mark.parametrize(
    "lines, version",
    [
        (['etcd_cluster_version{cluster_version="3.5"} 1\n'], "3.5.0"),
        (['etcd_cluster_version{cluster_version="3.6.0"} 1\n'], "3.6.0"),
        # After a change etcd keeps the old version's line at 0: the set one decides.
        (
            ['etcd_cluster_version{cluster_version="3.5"} 0\n', 'etcd_cluster_version{cluster_version="3.6"} 1\n'],
            "3.6.0",
        ),
        (
            ['etcd_cluster_version{cluster_version="3.5"} 1\n', 'etcd_cluster_version{cluster_version="3.6"} 0\n'],
            "3.5.0",
        ),
        (['etcd_cluster_version{cluster_version=""} 1\n'], None),
        ([], None),
    ],
)
def test_the_cluster_version_is_read_from_the_members_gauge(lines, version):
    from etcd_operator.core.cluster.metrics_sample import cluster_version_from_gauge

    assert cluster_version_from_gauge(lines) == version
