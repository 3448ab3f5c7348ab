"""What each controller is: a reconciler. One pass observes the object, asks its pure planner
for one step (`plan(spec, status, observed, now)`), has its executor carry the step out (a
table from step type to handler; an unknown step raises), and writes the object's status
once. Holds, leadership and deletion are checked in that one pass, before the step."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class Reconciler(Protocol):
    async def reconcile(self, body: Mapping[str, Any]) -> float | None:
        """One pass over a fresh copy of the object: seconds until the next pass, or None when
        nothing is due until the object changes."""
        ...
