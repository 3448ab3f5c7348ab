"""A pod is taken away, or a member added, only on the API server's recent acceptance of
the new pod (cluster/admission.py); a refusal waits and says so in PodSpecAccepted."""

from __future__ import annotations

import dataclasses

import pytest

from etcd_operator.core.cluster import admission
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.observed import PodAdmission
from etcd_operator.core.cluster.planner import next_step
from etcd_operator.core.cluster.spec import ClusterSpec
from tests.unit.cluster_scenarios import HASH, NOW, RECORDED, M, health_of, observed, spec

REFUSAL = 'pods "c-2" is forbidden: no PriorityClass with name no-such-class was found'


def answered(o, *answers):
    return dataclasses.replace(o, pod_admissions={x.member: x for x in answers})


def refused(member, age=0.0, pod_spec_hash=HASH):
    return PodAdmission(member, pod_spec_hash, REFUSAL, ("spec.pod.priorityClassName",), age)


def step(s, o):
    return next_step(s, RECORDED, o, health_of(s, o), NOW, desired_hash=HASH, recovery_allowed=True)


ROLL = observed([M(0), M(1), M(2, outdated=True)])  # c-2 follows the spec next
SCALE_UP = observed([M(0), M(1)])  # spec(3): c-2 is added
FAILED_POD = observed([M(0), M(1), M(2, healthy=False, pod_phase="Failed")])


@pytest.mark.parametrize(
    "o,kind",
    [(ROLL, a.RollMember), (SCALE_UP, a.AddLearner), (FAILED_POD, a.RestartFailedPod)],
    ids=["roll", "scale_up", "failed_pod"],
)
def test_without_an_acceptance_the_pod_is_checked_first(o, kind):
    checked = step(spec(3), o)
    assert isinstance(checked, a.CheckPodSpec), checked
    assert (checked.member, checked.pod_spec_hash, checked.before) == ("c-2", HASH, kind.__name__)
    assert isinstance(step(spec(3), answered(o, PodAdmission("c-2", HASH, age=1.0))), kind)


@pytest.mark.parametrize("o", [ROLL, SCALE_UP, FAILED_POD], ids=["roll", "scale_up", "failed_pod"])
def test_a_refused_pod_takes_nothing_away_and_adds_no_member(o):
    waited = step(spec(3), answered(o, refused("c-2", age=5.0)))
    assert type(waited) is a.Wait
    assert "spec.pod.priorityClassName" in waited.reason and REFUSAL in waited.reason


def test_an_old_acceptance_is_asked_again():
    stale = answered(ROLL, PodAdmission("c-2", HASH, age=admission.ACCEPTED_FOR + 1))
    assert isinstance(step(spec(3), stale), a.CheckPodSpec)


def test_a_refusal_is_asked_again_after_a_while_and_at_once_for_a_changed_spec():
    assert isinstance(step(spec(3), answered(ROLL, refused("c-2", age=admission.RECHECK_AFTER))), a.CheckPodSpec)
    other_spec = answered(ROLL, refused("c-2", pod_spec_hash="an-older-pod-spec"))
    assert isinstance(step(spec(3), other_spec), a.CheckPodSpec)


def test_an_acceptance_for_another_member_is_no_evidence():
    assert isinstance(step(spec(3), answered(ROLL, PodAdmission("c-1", HASH))), a.CheckPodSpec)


def test_the_survivor_pod_is_checked_before_it_is_deleted_for_force_new_cluster():
    action = a.ForceNewCluster("restart", "c-0", 0x100)
    assert isinstance(admission.gate(action, ROLL, HASH), a.CheckPodSpec)
    gone = dataclasses.replace(ROLL, pods={n: p for n, p in ROLL.pods.items() if n != "c-0"})
    assert admission.gate(action, gone, HASH) is action  # creating it takes nothing away


def test_a_create_waits_after_a_refusal_and_is_not_dry_run_first():
    create = a.CreateMemberPod("lost its pod", "c-2", 0x102, "x", joined_before=True)
    assert admission.gate(create, ROLL, HASH) is create
    assert type(admission.gate(create, answered(ROLL, refused("c-2", age=1.0)), HASH)) is a.Wait
    assert admission.gate(create, answered(ROLL, refused("c-2", age=admission.RECHECK_AFTER)), HASH) is create


def test_the_condition_names_the_refused_field_and_the_servers_message():
    condition = admission.condition(answered(ROLL, refused("c-2")), HASH)
    assert (condition.type, condition.status, condition.reason) == ("PodSpecAccepted", False, "RejectedByAPIServer")
    assert "spec.pod.priorityClassName" in condition.message and REFUSAL in condition.message
    assert admission.condition(answered(ROLL, refused("c-2", pod_spec_hash="old")), HASH).status is True
    assert admission.condition(answered(ROLL, PodAdmission("c-2", HASH)), HASH).status is True


@pytest.mark.parametrize(
    "path,field",
    [
        ("spec.priorityClassName", "spec.pod.priorityClassName"),
        ("spec.tolerations[0].effect", "spec.pod.tolerations"),
        ("spec.containers[0].resources.requests[cpu]", "spec.pod.resources"),
        ("metadata.annotations", "spec.pod.annotations"),
        ("spec.containers[0].image", "pod spec.containers[0].image"),
    ],
)
def test_a_refused_pod_field_is_named_as_the_spec_names_it(path, field):
    assert admission.spec_field(path) == field


def test_answers_age_on_the_process_clock_and_are_forgotten():
    memory = admission.remember({}, PodAdmission("c-2", HASH), 100.0)
    assert admission.carry(ROLL, memory, 112.5).pod_admissions["c-2"].age == 12.5
    assert admission.carry(ROLL, memory, 100.0 + admission.FORGET_AFTER + 1).pod_admissions == {}


def test_settings_probed_are_those_the_spec_sets():
    s = ClusterSpec.from_dict({"size": 3, "pod": {"priorityClassName": "x", "labels": {}, "tolerations": []}})
    assert admission.settings_in(s) == ("priorityClassName",)
    assert "priorityClassName" not in admission.without_setting(s, "priorityClassName").pod


def test_the_fields_the_api_server_names_reach_the_error():
    from etcd_operator.clients.kube import client as kube

    body = (
        '{"kind": "Status", "reason": "Invalid", "message": "Pod \\"c-2\\" is invalid", "details": {"causes": '
        '[{"field": "spec.tolerations[0].effect"}, {"field": "spec.tolerations[0].effect"}, {"reason": "x"}]}}'
    )
    with pytest.raises(kube.ApiError) as refused:
        kube._raise_for(422, body, "Unprocessable Entity")
    assert refused.value.fields == ("spec.tolerations[0].effect",)
    assert refused.value.message == 'Pod "c-2" is invalid'
