"""Whether the API server accepts a member's pod, asked before a step that takes a pod
away or adds a member. Pure: the answers come in through `Observed.pod_admissions`,
gathered by the executor (dry runs, refused creates) and remembered here on the acting
process's monotonic clock.

Rules:
- a step that deletes a member's pod to re-create it (a roll, the restart of a failed pod,
  the survivor's restart with --force-new-cluster) or that adds a member (AddLearner) is
  taken only on an acceptance of that member's pod with the pod spec acted on, answered at
  most ACCEPTED_FOR seconds ago; without one, the step is CheckPodSpec (a dry run);
- after a refusal the step waits, taking nothing away, and the same pod spec is asked again
  every RECHECK_AFTER seconds (a PriorityClass may be created meanwhile); a changed spec has
  another pod spec hash and is asked at once;
- creating a pod that does not exist takes nothing away, so it is not asked first; a refused
  create is remembered like a refused dry run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from etcd_operator.core import conditions as c
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.observed import Observed, PodAdmission
from etcd_operator.core.cluster.spec import ClusterSpec

ACCEPTED_FOR = 30.0  # seconds an acceptance counts as evidence for a step
RECHECK_AFTER = 30.0  # seconds before a refused pod spec is asked again
FORGET_AFTER = 600.0  # answers older than this are dropped from memory

# The spec.pod settings copied into a member pod, each of which the API server may refuse.
POD_SETTINGS = (
    "priorityClassName",
    "tolerations",
    "nodeSelector",
    "affinity",
    "resources",
    "annotations",
    "labels",
    "terminationGracePeriodSeconds",
)

# Where each setting lands in the pod, as the API server names a refused field.
_POD_PATHS = (
    ("spec.priorityClassName", "priorityClassName"),
    ("spec.priority", "priorityClassName"),
    ("spec.tolerations", "tolerations"),
    ("spec.nodeSelector", "nodeSelector"),
    ("spec.affinity", "affinity"),
    ("spec.containers[0].resources", "resources"),
    ("metadata.annotations", "annotations"),
    ("metadata.labels", "labels"),
    ("spec.terminationGracePeriodSeconds", "terminationGracePeriodSeconds"),
)

Memory = Mapping[str, tuple[PodAdmission, float]]  # member -> (answer, monotonic time it came)


def remember(memory: Memory, answer: PodAdmission, monotonic_now: float) -> dict[str, tuple[PodAdmission, float]]:
    kept = {m: (found, at) for m, (found, at) in memory.items() if monotonic_now - at <= FORGET_AFTER}
    kept[answer.member] = (dataclasses.replace(answer, age=0.0), monotonic_now)
    return kept


def carry(observed: Observed, memory: Memory, monotonic_now: float) -> Observed:
    """The remembered answers, each with its age on this process's clock."""
    answers = {
        member: dataclasses.replace(found, age=monotonic_now - at)
        for member, (found, at) in memory.items()
        if 0.0 <= monotonic_now - at <= FORGET_AFTER
    }
    return dataclasses.replace(observed, pod_admissions=answers)


def spec_field(pod_path: str) -> str:
    """The spec field a refused pod field comes from ("spec.pod.priorityClassName"), or the
    pod's own path when it is not a spec.pod setting."""
    for prefix, setting in _POD_PATHS:
        if pod_path == prefix or pod_path.startswith((prefix + ".", prefix + "[")):
            return f"spec.pod.{setting}"
    return f"pod {pod_path}"


def settings_in(spec: ClusterSpec) -> tuple[str, ...]:
    return tuple(key for key in POD_SETTINGS if spec.pod.get(key) not in (None, {}, []))


def without_setting(spec: ClusterSpec, key: str) -> ClusterSpec:
    """The spec with one spec.pod setting left out: a dry run of it tells whether that
    setting is what the API server refuses."""
    return dataclasses.replace(spec, pod={k: v for k, v in spec.pod.items() if k != key})


def _taken_or_added(action: a.Step, observed: Observed) -> tuple[str, int] | None:
    """The member whose pod the step takes away to re-create it, or whose pod it adds, and
    its etcd ID (0: not known yet)."""
    if isinstance(action, (a.RollMember, a.RestartFailedPod)):
        pod = observed.pods.get(action.member)
        return action.member, (pod.member_id if pod and pod.member_id else 0)
    if isinstance(action, a.ForceNewCluster) and action.member in observed.pods:
        return action.member, action.member_id
    if isinstance(action, a.AddLearner):
        return action.member, 0
    return None


def _created(action: a.Step) -> tuple[str, ...]:
    if isinstance(action, (a.CreateMemberPod, a.BootstrapFirstMember)):
        return (action.member,)
    if isinstance(action, (a.StartRestoredMembers, a.BootstrapMembers)):
        return action.members
    return ()


def answer_for(observed: Observed, member: str, pod_spec_hash: str) -> PodAdmission | None:
    found = observed.pod_admissions.get(member)
    return found if found is not None and found.pod_spec_hash == pod_spec_hash else None


def describe(answer: PodAdmission) -> str:
    fields = f" ({', '.join(answer.fields)})" if answer.fields else ""
    return f"the API server refuses the pod of {answer.member}{fields}: {answer.refused}"


def gate(action: a.Step, observed: Observed, pod_spec_hash: str) -> a.Step:
    """`action`, or what must come first: a dry run of the pod it needs, or a wait when the
    API server refused that pod."""
    subject = _taken_or_added(action, observed)
    if subject is not None:
        member, member_id = subject
        answer = answer_for(observed, member, pod_spec_hash)
        if answer is not None and answer.accepted and answer.age <= ACCEPTED_FOR:
            return action
        if answer is not None and not answer.accepted and answer.age < RECHECK_AFTER:
            return a.Wait(
                f"{action.kind} of {member} waits: {describe(answer)}. Nothing is taken down and no "
                f"member is added until the pod is accepted"
            )
        return a.CheckPodSpec(
            f"asking the API server (dry run) whether it accepts the new pod of {member} before {action.kind}",
            member,
            member_id,
            pod_spec_hash,
            action.kind,
        )
    for member in _created(action):
        answer = answer_for(observed, member, pod_spec_hash)
        if answer is not None and not answer.accepted and answer.age < RECHECK_AFTER:
            return a.Wait(f"{action.kind} of {member} waits: {describe(answer)}")
    return action


def condition(observed: Observed, pod_spec_hash: str) -> c.Condition:
    """PodSpecAccepted: False while the API server's latest answer for a member pod with the
    pod spec acted on is a refusal."""
    refused = sorted(
        (
            found
            for found in observed.pod_admissions.values()
            if found.pod_spec_hash == pod_spec_hash and not found.accepted
        ),
        key=lambda f: f.member,
    )
    if not refused:
        return c.Condition("PodSpecAccepted", True, "Accepted", "")
    return c.Condition(
        "PodSpecAccepted",
        False,
        "RejectedByAPIServer",
        f"{describe(refused[0])}. No member pod is taken down and no member is added until the API "
        f"server accepts it; fix spec.pod (or what it names), it is asked again every "
        f"{RECHECK_AFTER:.0f}s",
    )
