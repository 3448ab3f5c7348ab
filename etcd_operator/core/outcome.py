"""What carrying out one step did: the one result type the cluster, backup and restore
executors return. The controller that owns the object writes its status once, from the
planner's step and this outcome, and then posts the outcome's events."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Literal, get_args

# Kubernetes knows two event types; kopf's own exception() would post "Error".
EventType = Literal["Normal", "Warning"]
EVENT_TYPES: frozenset[str] = frozenset(get_args(EventType))
Event = tuple[EventType, str, str]  # (type, reason, message)
EventPoster = Callable[[EventType, str, str], None]


@dataclasses.dataclass(frozen=True)
class Outcome:
    done: bool = True  # False: the step could not be taken now; a later pass tries again
    message: str = ""  # why it was not taken, for the log
    _: dataclasses.KW_ONLY
    status_fields: Mapping[str, Any] | None = None  # status only the executor can know
    failure: tuple[str, str] | None = None  # (reason, message): the object's work ends
    retry_after: float | None = None  # seconds until the next pass; None: the controller's own delay
    events: tuple[Event, ...] = ()  # posted after the status is written


NOTHING_DONE = Outcome()
