"""What a failed test prints about its namespace, shared by the substrate's and the e2e tiers'
conftests."""

from __future__ import annotations


def print_events(core, namespace: str) -> None:
    """The namespace's events, one line each; a failure to list them is printed, never raised."""
    print(f"\n===== diagnostics for namespace {namespace} =====")
    try:
        for event in core.list_namespaced_event(namespace).items:
            obj = event.involved_object
            print(f"event {event.type} {obj.kind}/{obj.name} {event.reason}: {event.message}")
    except Exception as e:  # diagnostics must never hide the real failure
        print(f"(could not list events: {e})")
