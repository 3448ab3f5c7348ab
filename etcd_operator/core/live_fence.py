"""The check behind every executor's live fence: an object read again right before a create
must still be the one the pass decided on, and not be going away. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def refusal(subject: str, live: Mapping[str, Any] | None, decided_uid: str | None = None) -> str | None:
    """Why nothing may be created for `subject` (e.g. "EtcdCluster db"), as its `live` object
    (None: not found) says; with `decided_uid`, another object under the same name is refused
    too. None when creating may go on."""
    if live is None:
        return f"{subject} is gone"
    meta = live.get("metadata") or {}
    if decided_uid is not None and meta.get("uid") != decided_uid:
        return f"{subject} is another object now (uid {meta.get('uid')}, not {decided_uid})"
    if meta.get("deletionTimestamp"):
        return f"{subject} is being deleted"
    return None
