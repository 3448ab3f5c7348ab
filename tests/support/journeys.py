"""Names the journey tier (e2e/journeys) shares between its conftest and its tests."""

from __future__ import annotations

import uuid

JOURNEYS = ("demo", "before-cluster", "before-secret", "propagation", "operator-down", "sharding", "helm")
SESSION = uuid.uuid4().hex[:5]


def journey_namespace(journey: str) -> str:
    return f"journey-{SESSION}-{journey}"
