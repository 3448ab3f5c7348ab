"""Go-style durations as used in the CRDs ("90s", "3m", "1h30m", "30d")."""

from __future__ import annotations

import re

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhd])")


def parse_duration(text: str) -> float:
    """Seconds in `text`; raises ValueError for anything that is not a duration."""
    text = text.strip()
    parts = _PART.findall(text)
    if not text or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {text!r} (expected e.g. 90s, 3m, 1h30m)")
    return sum(float(n) * _UNITS[u] for n, u in parts)
