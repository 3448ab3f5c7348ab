"""Helpers shared by the kopf adapters."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

import kopf

from etcd_operator.controllers.reconciler import Reconciler
from etcd_operator.core.leadership_fence import process_write_guard
from etcd_operator.core.outcome import EVENT_TYPES, EventPoster, EventType

POLL = 0.5
# A finished object is looked at again when it changes, or after this long.
IDLE_UNTIL_CHANGED = 3600.0
WAKE_COALESCE = 0.1  # after a wake-up, so that one pass sees a burst of watch events together


# The object whose handler runs in this task (and in the tasks it starts): the operator's
# module loggers name it on their lines through ObjectOfTheHandler.
_handled_object: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("handled_object", default=None)


def object_ref(body: Mapping[str, Any]) -> dict[str, Any]:
    """The object as kopf's per-object logger refers to it (its `k8s_ref`)."""
    meta = body.get("metadata") or {}
    return {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "namespace": meta.get("namespace"),
    }


@contextlib.contextmanager
def logging_about(body: Mapping[str, Any]) -> Iterator[None]:
    """Every line logged inside (by any logger, in this task) is about `body`."""
    token = _handled_object.set(object_ref(body))
    try:
        yield
    finally:
        _handled_object.reset(token)


class ObjectOfTheHandler(logging.Filter):
    """On the log handler: a line that names no object (a module logger's) gets the object
    whose handler logged it; a line outside any handler stays as it is."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "k8s_ref", None) is None:
            ref = _handled_object.get()
            if ref is not None:
                record.k8s_ref = ref
        if not hasattr(record, "logger"):
            record.logger = record.name  # JSON lines name their logger too
        return True


def event_poster(body: kopf.Body) -> EventPoster:
    """A (type, reason, message) callable that posts a Kubernetes Event about `body`. Only
    Kubernetes' two types pass: any other (kopf.exception's "Error") raises."""

    def post(type_: EventType, reason: str, message: str) -> None:
        if type_ not in EVENT_TYPES:
            raise ValueError(f"event type {type_!r} is not one of {sorted(EVENT_TYPES)} (reason {reason})")
        if process_write_guard().time_left() > 0:  # a deposed replica tells nobody anything
            kopf.event(body, type=type_, reason=reason, message=message)

    return post


def snapshot(body: kopf.Body) -> dict:
    """A plain, stable copy of a daemon's live body for one pass."""
    return copy.deepcopy(dict(body))


def looked_at(obj: Mapping[str, Any]) -> tuple[Any, dict[str, str]]:
    """What a pass's sleep compares: the object's generation (its spec) and its annotations."""
    meta = obj.get("metadata", {})
    return meta.get("generation"), dict(meta.get("annotations") or {})


async def sleep_unless_changed(
    stopped: kopf.DaemonStopped,
    body: kopf.Body,
    seconds: float,
    seen: tuple[Any, dict[str, str]],
    wake: asyncio.Event | None = None,
) -> None:
    """Sleeps, but wakes at once when the live `body`'s looked_at differs from `seen`, the
    copy the last pass worked on (an edit made during that pass wakes it at once too), or
    when `wake` is set (a child of the object changed; the caller clears it as a pass starts)."""
    deadline = time.monotonic() + seconds
    while not stopped:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        if wake is None:
            await stopped.wait(min(POLL, left))
        else:
            try:
                async with asyncio.timeout(min(POLL, left)):  # no task per wait, as wait_for makes
                    await wake.wait()
            except TimeoutError:
                pass
            if wake.is_set():
                await asyncio.sleep(WAKE_COALESCE)  # the events of one change come in a burst
                return
        if looked_at(body) != seen:
            return


async def run_until_deleted(
    reconciler: Reconciler,
    body: kopf.Body,
    stopped: kopf.DaemonStopped,
    logger: kopf.Logger,
    error_backoff: float,
    *,
    before_pass: Callable[[Mapping[str, Any]], Awaitable[None]] | None = None,
    on_error: Callable[[], None] | None = None,
    wake: asyncio.Event | None = None,
    wakeable: Callable[[], bool] = lambda: True,
) -> None:
    """The daemon loop: calls `reconciler.reconcile` on fresh copies of the body for as long as the
    object exists. It returns the seconds until the next pass, or None when nothing is left
    to do until the spec or the annotations change. `before_pass` runs on each copy first;
    `on_error` after a failed pass; `wake` (when `wakeable()` after a pass) ends the sleep
    early. The daemon never returns on its own: kopf does not restart a daemon that
    returned, so a later fix to the spec would go unseen. Every line logged meanwhile is
    about `body` (logging_about)."""
    with logging_about(body):
        while not stopped:
            if wake is not None:
                wake.clear()  # a child that changes during this pass wakes the next one at once
            seen = snapshot(body)
            if before_pass is not None:
                await before_pass(seen)
            try:
                delay = await reconciler.reconcile(seen)
            except Exception as e:  # a failed pass is retried; the daemon lives on
                logger.exception("reconcile failed: %s", e)
                if on_error is not None:
                    on_error()
                delay = error_backoff
            # Only what the sleep compares is kept while it lasts, not the pass's whole copy.
            compared = looked_at(seen)
            del seen
            await sleep_unless_changed(
                stopped, body, IDLE_UNTIL_CHANGED if delay is None else delay, compared, wake if wakeable() else None
            )
