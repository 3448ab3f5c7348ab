"""What a test needs, as markers (registered in pyproject.toml), and the check the root conftest
runs at every collection: a test that uses a fixture or helper carries the marker that it
implies, so the markers `make test` schedules by (tests/run.sh) cannot drift from the tests.
Imports nothing of the harness: the pure tiers load it with the root conftest."""

from __future__ import annotations

import types
from collections.abc import Iterable, Mapping

ON_THE_INSTANCE = ("needs_cluster", "needs_nodes")

# The fixtures of a test that stops, partitions, drains or deletes a node, holding the nodes to
# its run (tests/support/real_nodes_fixtures.py).
NODE_FAULT_FIXTURES = ("nodes_to_the_module", "nodes_to_the_test")


def faults_nodes(item: object) -> bool:
    """Whether a pytest item (or None) uses one of NODE_FAULT_FIXTURES."""
    return bool(set(NODE_FAULT_FIXTURES) & set(getattr(item, "fixturenames", ())))


# A fixture (used directly or through another fixture) -> the markers a test using it carries
# one of.
BY_FIXTURE: dict[str, tuple[str, ...]] = {
    "real_nodes_use": ON_THE_INSTANCE,  # under every fixture of the real-node instance
    "e2e_nodes": ON_THE_INSTANCE,  # the journeys' and scenarios' instance (e2e/target.py)
    "nodes_to_the_module": ("needs_nodes",),
    "nodes_to_the_test": ("needs_nodes",),
    "container_faults": ("needs_nodes",),
    "operator_release": ("needs_release",),
    "operator_namespace": ("needs_release",),
    "operator_process": ("needs_operator_process",),
    "s3_settings": ("needs_store",),
}

# A helper in the test module's globals ("module.name", or a whole module) -> markers.
BY_HELPER: dict[str, tuple[str, ...]] = {
    "tests.support.etcd_process.EtcdProcess": ("needs_etcd",),
    "tests.support.operator_process.OperatorProcess": ("needs_operator_process",),
    "tests.support.s3.s3_client": ("needs_store",),
    "tests.support.s3.create_credentials_secret": ("needs_store",),
    "tests.support.s3.PrivateMinio": ("needs_store",),
    "images.containerd": ("needs_containerd", "needs_nodes"),  # its own containerd, or the nodes'
}

# A marker -> the markers a test carrying it also carries one of (what it stands on).
BY_MARKER: dict[str, tuple[str, ...]] = {
    "needs_release": ("needs_nodes",),
    "needs_store": ON_THE_INSTANCE,
    "needs_operator_process": ON_THE_INSTANCE,
    "lane2": (*ON_THE_INSTANCE, "needs_etcd", "needs_containerd"),  # a host lane's, never a pure test
    "lane4": (*ON_THE_INSTANCE, "needs_etcd", "needs_containerd"),  # the same, for the third host lane
    "lane5": (*ON_THE_INSTANCE, "needs_etcd", "needs_containerd"),  # the same, for the fourth host lane
    "lane6": (*ON_THE_INSTANCE, "needs_etcd", "needs_containerd"),  # the same, for the fifth host lane
    "lane3": ON_THE_INSTANCE,  # a host module in the real-node run, never a pure test
}


def helper_names(module_globals: Mapping[str, object]) -> set[str]:
    """The dotted names of what a test module imported: modules, and functions and classes."""
    names = set()
    for value in module_globals.values():
        if isinstance(value, types.ModuleType):
            names.add(value.__name__)
        elif isinstance(getattr(value, "__module__", None), str) and isinstance(getattr(value, "__name__", None), str):
            names.add(f"{value.__module__}.{value.__name__}")  # type: ignore[attr-defined]
    return names


def missing(fixturenames: Iterable[str], module_globals: Mapping[str, object], markers: Iterable[str]) -> list[str]:
    """What the test uses whose marker it lacks, as 'uses X: mark one of A, B'."""
    carried = set(markers)
    used = [(f"fixture {name}", BY_FIXTURE[name]) for name in fixturenames if name in BY_FIXTURE]
    used += [(name, BY_HELPER[name]) for name in sorted(helper_names(module_globals)) if name in BY_HELPER]
    used += [(f"marker {name}", BY_MARKER[name]) for name in sorted(carried) if name in BY_MARKER]
    return [f"uses {what}: mark one of {', '.join(needed)}" for what, needed in used if not carried & set(needed)]
