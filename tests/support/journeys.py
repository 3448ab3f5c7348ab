"""Names the journey tier (e2e/journeys) shares between its conftest and its tests."""

from __future__ import annotations

import uuid

from tests.support.helm import LOCAL_VALUES

RELEASE = "etcd-operator-journeys"  # the Helm release and its namespace on the local substrate
JOURNEYS = ("demo", "before-cluster", "before-secret", "propagation", "operator-down", "helm")
SESSION = uuid.uuid4().hex[:5]


def journey_namespace(journey: str) -> str:
    return f"journey-{SESSION}-{journey}"


def install_values() -> list[str]:
    """The release watches exactly the journeys' namespaces, by name."""
    names = ",".join(journey_namespace(j) for j in JOURNEYS)
    return ["-f", str(LOCAL_VALUES), "--set", "watchNamespaces={" + names + "}", "--set", "replicas=1"]
