"""Carries the 'unhealthy since' and 'quorum lost since' clocks from the last status into
this pass's observation. Pure."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from etcd_operator.cluster.health import member_healthy, member_name, quorum_loss_evidence
from etcd_operator.cluster.observed import Observed
from etcd_operator.timefmt import parse_time


def carry_timers(observed: Observed, previous_status: Mapping[str, Any]) -> Observed:
    previous = {m.get("name"): parse_time(m.get("unhealthySince")) for m in previous_status.get("members") or []}
    unhealthy_since = {}
    for member in observed.etcd.members:
        name = member_name(observed, member)
        if name and not member_healthy(observed, member.id):
            unhealthy_since[name] = previous.get(name) or observed.now
    no_quorum_since = None
    if quorum_loss_evidence(observed):
        no_quorum_since = parse_time(previous_status.get("noQuorumSince")) or observed.now
    return dataclasses.replace(observed, unhealthy_since=unhealthy_since, no_quorum_since=no_quorum_since)
