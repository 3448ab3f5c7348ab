"""Carries the 'unhealthy since' and 'quorum lost since' clocks into this pass's
observation. Pure."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from etcd_operator.cluster.health import member_healthy, member_name, quorum_loss_evidence
from etcd_operator.cluster.observed import Observed
from etcd_operator.timefmt import parse_time


def carry_timers(observed: Observed, previous_status: Mapping[str, Any],
                 evidence_seen_since: float | None) -> Observed:
    """`evidence_seen_since` is when this operator process began to see, in every pass since,
    evidence that quorum is lost (None if its last pass did not see it). The quorum-loss
    clock starts there and only there: a start time read back from status may belong to an
    earlier outage whose end was never written, or to another replica, and would declare
    the loss early. A restarted operator therefore waits the full timeout again."""
    previous = {m.get("name"): parse_time(m.get("unhealthySince")) for m in previous_status.get("members") or []}
    unhealthy_since = {}
    for member in observed.etcd.members:
        name = member_name(observed, member)
        if name and not member_healthy(observed, member.id):
            unhealthy_since[name] = previous.get(name) or observed.now
    no_quorum_since = None
    if quorum_loss_evidence(observed):
        no_quorum_since = evidence_seen_since if evidence_seen_since is not None else observed.now
    return dataclasses.replace(observed, unhealthy_since=unhealthy_since, no_quorum_since=no_quorum_since)
