"""The status merge patch a controller writes. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def changed_fields(previous: Mapping[str, Any], status: Mapping[str, Any]) -> dict[str, Any]:
    """The top-level fields of `status` that differ from `previous` (None removes a field);
    empty when nothing changed."""
    return {key: value for key, value in status.items() if previous.get(key) != value}
