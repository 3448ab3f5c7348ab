"""Watch-driven reconciliation on real nodes: an operator whose steady poll and resync are far
longer than the test (a shard release of the chart with those settings) recreates a deleted
member pod within seconds, and observes an edited spec within seconds, so it acted on the
watch events and not on a poll."""

from __future__ import annotations

import json
import time

import pytest

from tests.support import chart_release
from tests.support.clusters import PLAINTEXT, member_pods, wait_healthy
from tests.support.kubectl import kubectl, kubectl_json
from tests.support.waiting import wait_for

pytestmark = [
    pytest.mark.needs_nodes,
    pytest.mark.needs_release,
    pytest.mark.usefixtures("kubectl_on_real_nodes", "operator_release"),
]

POLL_SECONDS = 600  # neither the steady poll nor the resync can come during the test
STEADY_LINE = "demo: steady; members polled every 600s"
REDECIDED_LINE = "demo: CreateMemberPod decided on cached state; observing live before acting"


def pod_uid(namespace: str, name: str) -> str | None:
    found = kubectl_json("get", "pods", "-n", namespace, "--field-selector", f"metadata.name={name}")["items"]
    return found[0]["metadata"]["uid"] if found else None


def test_a_deleted_member_pod_is_recreated_on_the_watch_event_not_at_the_next_poll(
    real_nodes, namespace, record_property
):
    settings = {"STEADY_POLL_SECONDS": str(POLL_SECONDS), "RESYNC_SECONDS": str(POLL_SECONDS)}
    with chart_release.shard_release(real_nodes.kubeconfig, "watch-test", [namespace], settings) as operator:
        cluster = {
            "apiVersion": "etcd.operator.dev/v1alpha1",
            "kind": "EtcdCluster",
            "metadata": {"name": "demo", "namespace": namespace},
            "spec": {**PLAINTEXT, "size": 3, "storage": {"size": "1Gi"}},
        }
        kubectl("apply", "-f", "-", input=json.dumps(operator.claim(cluster)))
        wait_healthy(namespace, "demo", 3, timeout=300)
        # The daemon has finished its passes and now sleeps for the whole poll interval.
        wait_for(lambda: STEADY_LINE in operator.logs(), 60, what="the cluster's daemon at steady state")
        before = operator.logs()

        victim = sorted(p["metadata"]["name"] for p in member_pods(namespace, "demo"))[-1]
        old_uid = pod_uid(namespace, victim)
        kubectl("delete", "pod", victim, "-n", namespace, "--wait=true", "--timeout=60s")
        gone = time.monotonic()  # the pod is out of the API: its watch event is sent now
        new_uid = wait_for(
            lambda: (uid := pod_uid(namespace, victim)) and uid != old_uid and uid,
            60,
            interval=0.1,
            what=f"{victim} recreated",
        )
        reaction = time.monotonic() - gone
        print(
            f"\n{victim} recreated {reaction:.2f}s after its pod was deleted (steady poll and resync: {POLL_SECONDS}s)"
        )
        record_property("reaction_seconds", round(reaction, 2))
        assert new_uid != old_uid
        assert reaction < POLL_SECONDS, "the pod came back only at a poll: the watch did not wake the daemon"

        after = operator.logs()
        assert after.startswith(before), "the operator's container restarted during the test"
        # The waking pass read the caches, and the step was decided again on a live listing.
        assert REDECIDED_LINE in after[len(before) :], after[-3000:]
        wait_healthy(namespace, "demo", 3, timeout=300)

        # An edit of the spec ends the sleeping daemon's sleep too (it looks at its live copy
        # of the object, which kopf's watch keeps current), not the poll.
        wait_for(lambda: operator.logs().count(STEADY_LINE) >= 2, 60, what="the daemon asleep again")
        generation = kubectl_json("get", "etcdcluster", "demo", "-n", namespace)["metadata"]["generation"]
        kubectl("patch", "etcdcluster", "demo", "-n", namespace, "--type=merge", "-p", '{"spec":{"paused":true}}')
        edited = time.monotonic()
        wait_for(
            lambda: (
                kubectl_json("get", "etcdcluster", "demo", "-n", namespace).get("status", {}).get("observedGeneration")
                == generation + 1
            ),
            60,
            interval=0.2,
            what="the paused spec observed",
        )
        noticed = time.monotonic() - edited
        print(f"the edited spec was observed {noticed:.2f}s after the edit (steady poll: {POLL_SECONDS}s)")
        record_property("spec_edit_seconds", round(noticed, 2))
        assert noticed < POLL_SECONDS, "the edit was seen only at a poll: the sleep did not notice it"
        kubectl("patch", "etcdcluster", "demo", "-n", namespace, "--type=merge", "-p", '{"spec":{"paused":false}}')
        # The session's unsharded operator left the claimed cluster alone throughout.
        shared = chart_release.release_logs()
        assert (
            f"{namespace}/demo matches this shard's selector but is held by "
            f"etcd.operator.dev/finalizer-watch-test" in shared
        )
        assert f"{namespace}/demo:" not in shared
