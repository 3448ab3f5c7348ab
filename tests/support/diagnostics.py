"""What a failed test prints about its namespace, shared by the substrate's and the e2e tiers'
conftests."""

from __future__ import annotations

import pathlib
import uuid

TAIL_BYTES = 6000


def print_events(core, namespace: str) -> None:
    """The namespace's events, one line each; a failure to list them is printed, never raised."""
    print(f"\n===== diagnostics for namespace {namespace} =====")
    try:
        for event in core.list_namespaced_event(namespace).items:
            obj = event.involved_object
            print(f"event {event.type} {obj.kind}/{obj.name} {event.reason}: {event.message}")
    except Exception as e:  # diagnostics must never hide the real failure
        print(f"(could not list events: {e})")


def print_operator_pod_logs(operator_namespace: str, tail: int = 80) -> None:
    """The last lines of every operator pod's log in `operator_namespace` (KUBECONFIG's cluster)."""
    from tests.support.kubectl import kubectl

    logs = kubectl(
        "logs",
        "-n",
        operator_namespace,
        "-l",
        "app.kubernetes.io/name=etcd-operator",
        "--all-containers",
        "--prefix",
        f"--tail={tail}",
        check=False,
    )
    print(f"----- operator pods in {operator_namespace} -----\n{logs.stdout}{logs.stderr}")


def print_tail(path: pathlib.Path, size: int = TAIL_BYTES) -> None:
    """The last `size` bytes of a log file, if it exists."""
    if path.exists():
        data = path.read_bytes()[-size:].decode(errors="replace")
        print(f"----- tail of {path} -----\n{data}")


def fresh_namespace_name(prefix: str, test_name: str) -> str:
    """A fresh namespace name for one test: the prefix, the test's name, a random suffix."""
    name = f"{prefix}-{test_name[:30].lower().replace('_', '-').strip('-')}-{uuid.uuid4().hex[:5]}"
    return "".join(c for c in name if c.isalnum() or c == "-")
