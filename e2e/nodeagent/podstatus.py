"""Pod status as kubelet reports it: phase, conditions (with stable transition times),
addresses and container statuses."""

from __future__ import annotations

from nodeagent import clock

OUR_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
MANAGED_FIELDS = (
    "phase",
    "reason",
    "message",
    "conditions",
    "podIP",
    "podIPs",
    "hostIP",
    "hostIPs",
    "startTime",
    "containerStatuses",
    "initContainerStatuses",
)


class ConditionClock:
    """Keeps lastTransitionTime stable while a condition's status stays the same."""

    def __init__(self, existing: list[dict] | None):
        self.known = {c["type"]: c for c in existing or []}

    def condition(self, kind: str, status: bool, reason: str | None = None, message: str | None = None) -> dict:
        value = "True" if status else "False"
        previous = self.known.get(kind)
        since = (
            previous["lastTransitionTime"]
            if previous and previous.get("status") == value and previous.get("lastTransitionTime")
            else clock.rfc3339()
        )
        out = {"type": kind, "status": value, "lastProbeTime": None, "lastTransitionTime": since}
        if reason:
            out["reason"] = reason
        if message:
            out["message"] = message
        self.known[kind] = out
        return out


def phase_of(statuses: list[dict], initialized: bool, terminal: str | None) -> str:
    if terminal:
        return terminal
    if not initialized:
        return "Pending"
    running = never_started = 0
    for s in statuses:
        state = s["state"]
        if "running" in state:
            running += 1
        elif "waiting" in state and not s.get("lastState"):
            never_started += 1
    if never_started:
        return "Pending"
    return "Running" if statuses else "Pending"


def build(
    *,
    ip: str | None,
    host_ip: str,
    start_time: str,
    init_statuses: list[dict],
    statuses: list[dict],
    initialized: bool,
    terminal: str | None,
    conditions: ConditionClock,
    other_conditions: list[dict],
    eviction: tuple[str, str] | None = None,
) -> dict:
    """eviction: (reason, message) of a pod the node stopped for good (kubelet eviction or
    node shutdown); reported as the pod's reason and message with DisruptionTarget=True."""
    phase = phase_of(statuses, initialized, terminal)
    not_ready = [s["name"] for s in statuses if not s["ready"]]
    pending_init = [s["name"] for s in init_statuses if not s["ready"]]
    if phase == "Succeeded":
        ready_reason, ready_message = "PodCompleted", None
    elif not_ready:
        ready_reason, ready_message = "ContainersNotReady", f"containers with unready status: [{' '.join(not_ready)}]"
    else:
        ready_reason = ready_message = None
    all_ready = not not_ready and phase == "Running"
    conds = [
        conditions.condition("PodReadyToStartContainers", bool(ip)),
        conditions.condition(
            "Initialized",
            initialized,
            None if initialized else "ContainersNotInitialized",
            None if initialized else f"containers with incomplete status: [{' '.join(pending_init)}]",
        ),
        conditions.condition("Ready", all_ready, ready_reason, ready_message),
        conditions.condition("ContainersReady", all_ready, ready_reason, ready_message),
        conditions.condition("PodScheduled", True),
    ]
    if eviction:
        conds.append(conditions.condition("DisruptionTarget", True, "TerminationByKubelet", eviction[1]))
    ours = {c["type"] for c in conds}
    status = {
        "phase": phase,
        "conditions": conds + [c for c in other_conditions if c["type"] not in OUR_CONDITIONS + tuple(ours)],
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "startTime": start_time,
        "containerStatuses": statuses,
    }
    if eviction:
        status["reason"], status["message"] = eviction
    if ip:
        status["podIP"] = ip
        status["podIPs"] = [{"ip": ip}]
    if init_statuses:
        status["initContainerStatuses"] = init_statuses
    return status


def managed(status: dict | None) -> dict:
    status = status or {}
    return {k: status[k] for k in MANAGED_FIELDS if k in status}
