"""Kubernetes-style conditions. lastTransitionTime moves only when the status changes."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Condition:
    type: str
    status: bool | None  # None is "Unknown"
    reason: str
    message: str = ""

    @property
    def status_text(self) -> str:
        return {True: "True", False: "False", None: "Unknown"}[self.status]


STALLED = "Stalled"
NOT_STALLED = "NotStalled"


def stalled(blocker: Condition | None) -> Condition:
    """kstatus' Stalled: True while the object cannot progress until a person acts, with the
    reason and message of the condition that says what to do; False once nothing is."""
    if blocker is None:
        return Condition(STALLED, False, NOT_STALLED, "")
    return Condition(STALLED, True, blocker.reason, blocker.message or f"{blocker.type} is {blocker.status_text}")


def merge(
    previous: Iterable[Mapping[str, Any]] | None, current: Iterable[Condition], now: str, generation: int | None
) -> list[dict[str, Any]]:
    old = {c.get("type"): c for c in previous or []}
    merged = []
    for condition in current:
        before = old.get(condition.type) or {}
        changed = before.get("status") != condition.status_text
        entry = {
            "type": condition.type,
            "status": condition.status_text,
            "reason": condition.reason,
            "message": condition.message,
            "lastTransitionTime": now
            if changed or not before.get("lastTransitionTime")
            else before["lastTransitionTime"],
        }
        if generation is not None:
            entry["observedGeneration"] = generation
        merged.append(entry)
    return merged


def find(conditions: Iterable[Mapping[str, Any]] | None, type_: str) -> Mapping[str, Any] | None:
    return next((c for c in conditions or [] if c.get("type") == type_), None)
