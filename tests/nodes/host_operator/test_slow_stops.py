"""A rolling upgrade on a node that is slow to stop pods: each deleted member keeps answering
for 3 s. The stop is the kubelet's own: every member pod has a preStop sleep (put there by a
webhook, tests/support/slow_stops.py), which the kubelet runs before it sends SIGTERM."""

from __future__ import annotations

import pytest

from tests.support.cluster_checks import assert_all_acked_writes_present
from tests.support.clusters import apply_cluster, events, member_endpoints, member_pods, patch_spec, wait_healthy
from tests.support.etcd_probes import AckedWriter, MembershipRecorder
from tests.support.slow_stops import pre_stop_seconds, slow_stops
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.needs_nodes, pytest.mark.needs_operator_process]

STOP_SECONDS = 3


def test_rolling_upgrade_from_3_5_to_3_6_keeps_quorum_and_data(namespace, operator):
    # As on a busy node, a rolled member's etcd keeps answering for a while after its pod's
    # deletion: the roll must wait for it to stop, not roll it again or roll another member.
    with slow_stops(namespace, STOP_SECONDS):
        apply_cluster(namespace, "up", {"size": 3, "version": "3.5.35", "storage": {"size": "1Gi"}})
        obj = wait_healthy(namespace, "up", 3)
        assert obj["status"]["currentVersion"] == "3.5.35"
        assert [pre_stop_seconds(p) for p in member_pods(namespace, "up")] == [STOP_SECONDS] * 3
        writer = AckedWriter(lambda: member_endpoints(namespace, "up")).start()
        recorder = MembershipRecorder(lambda: member_endpoints(namespace, "up")).start()
        patch_spec(namespace, "up", {"version": "3.6.16"})
        wait_for(
            lambda: (
                (o := wait_healthy(namespace, "up", 3))
                and o["status"]["currentVersion"] == "3.6.16"
                and all(p["spec"]["containers"][0]["image"].endswith(":v3.6.16") for p in member_pods(namespace, "up"))
            ),
            400,
            what="every member on 3.6.16",
        )
        recorder.stop()
        writer.stop()
    assert all(sample.has_quorum for sample in recorder.samples), "quorum was lost during the upgrade"
    assert len(recorder.configurations()) == 1, "an upgrade must not change membership"
    assert_all_acked_writes_present(member_endpoints(namespace, "up"), writer)
    reasons = [e["reason"] for e in events(namespace, "up")]
    assert reasons.count("MemberRolling") == 3 and "LeaderMoved" in reasons, f"each member rolled once: {reasons}"
