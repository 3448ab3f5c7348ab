"""Watch-driven reconciliation on the substrate: with a steady poll and a resync far longer
than the test, a deleted member pod is recreated within seconds, so the operator acted on
the watch event and not on a poll."""

from __future__ import annotations

import time

import pytest

from tests.support.clusters import apply_cluster, member_pods, wait_healthy
from tests.support.kubectl import kubectl, kubectl_json
from tests.support.operator_process import OperatorProcess
from tests.support.waiting import wait_for

pytestmark = pytest.mark.substrate

POLL_SECONDS = 600  # neither the steady poll nor the resync can come during the test
STEADY_LINE = "demo: steady; members polled every 600s"
REDECIDED_LINE = "demo: CreateMemberPod decided on cached state; observing live before acting"


def pod_uid(namespace: str, name: str) -> str | None:
    found = kubectl_json("get", "pods", "-n", namespace, "--field-selector", f"metadata.name={name}")["items"]
    return found[0]["metadata"]["uid"] if found else None


def test_a_deleted_member_pod_is_recreated_on_the_watch_event_not_at_the_next_poll(substrate, namespace,
                                                                                   record_property):
    operator = OperatorProcess(substrate, namespace, env={
        "STEADY_POLL_SECONDS": str(POLL_SECONDS), "RESYNC_SECONDS": str(POLL_SECONDS)}).start()
    try:
        apply_cluster(namespace, "demo", {"size": 3, "storage": {"size": "1Gi"}})
        wait_healthy(namespace, "demo", 3)
        # The daemon has finished its passes and now sleeps for the whole poll interval.
        wait_for(lambda: STEADY_LINE in operator.log_text(), 60, what="the cluster's daemon at steady state")
        operator.mark_log("===== test: deleting a member pod =====")

        victim = sorted(p["metadata"]["name"] for p in member_pods(namespace, "demo"))[-1]
        old_uid = pod_uid(namespace, victim)
        kubectl("delete", "pod", victim, "-n", namespace, "--wait=true", "--timeout=60s")
        gone = time.monotonic()  # the pod is out of the API: its watch event is sent now
        new_uid = wait_for(lambda: (uid := pod_uid(namespace, victim)) and uid != old_uid and uid, 60,
                           interval=0.1, what=f"{victim} recreated")
        reaction = time.monotonic() - gone
        print(f"\n{victim} recreated {reaction:.2f}s after its pod was deleted "
              f"(steady poll and resync: {POLL_SECONDS}s)")
        record_property("reaction_seconds", round(reaction, 2))
        assert new_uid != old_uid
        assert reaction < POLL_SECONDS, "the pod came back only at a poll: the watch did not wake the daemon"

        after = operator.log_text().split("===== test: deleting a member pod =====", 1)[1]
        # The waking pass read the caches, and the step was decided again on a live listing.
        assert REDECIDED_LINE in after, after[-3000:]
        wait_healthy(namespace, "demo", 3)
    finally:
        operator.stop()
