"""Helpers shared by the kopf adapters."""

from __future__ import annotations

import copy
import logging
from typing import Any, Awaitable, Callable, Mapping

import kopf

POLL = 0.5
# A finished object is looked at again when it changes, or after this long.
IDLE_UNTIL_CHANGED = 3600.0


def event_poster(body: kopf.Body):
    """A (type, reason, message) callable that posts a Kubernetes Event about `body`."""
    def post(type_: str, reason: str, message: str) -> None:
        kopf.event(body, type=type_, reason=reason, message=message)
    return post


def snapshot(body: kopf.Body) -> dict:
    """A plain, stable copy of a daemon's live body for one pass."""
    return copy.deepcopy(dict(body))


async def sleep_unless_changed(stopped: kopf.DaemonStopped, body: kopf.Body, seconds: float,
                               seen: Mapping[str, Any]) -> None:
    """Sleeps, but wakes at once when the spec or the annotations differ from `seen`, the
    copy the last pass worked on (an edit made during that pass wakes it at once too)."""
    generation = seen.get("metadata", {}).get("generation")
    annotations = dict(seen.get("metadata", {}).get("annotations") or {})
    waited = 0.0
    while waited < seconds and not stopped:
        await stopped.wait(min(POLL, seconds - waited))
        waited += POLL
        meta = body.get("metadata", {})
        if meta.get("generation") != generation or dict(meta.get("annotations") or {}) != annotations:
            return


async def run_until_deleted(reconcile: Callable[[Mapping[str, Any]], Awaitable[float | None]],
                            body: kopf.Body, stopped: kopf.DaemonStopped, logger: logging.Logger,
                            error_backoff: float) -> None:
    """Calls `reconcile` on fresh copies of the body for as long as the object exists.
    It returns the seconds until the next pass, or None when nothing is left to do until
    the spec or the annotations change. The daemon never returns on its own: kopf does not
    restart a daemon that returned, so a later fix to the spec would go unseen."""
    while not stopped:
        seen = snapshot(body)
        try:
            delay = await reconcile(seen)
        except Exception as e:  # a failed pass is retried; the daemon lives on
            logger.exception("pass failed: %s", e)
            delay = error_backoff
        await sleep_unless_changed(stopped, body, IDLE_UNTIL_CHANGED if delay is None else delay, seen)
