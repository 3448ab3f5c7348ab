"""A member's own faults on real nodes, which fault no node and so run beside the other runs'
tests (node faults: test_node_faults.py), with one operator release and one cluster for both: a
member that lost its data is replaced on the node left without one; a member whose volume
fills up crashes and is replaced after memberUnhealthyTimeout, with quorum kept and no NOSPACE
alarm (that is etcd's quota, not the disk). Each prints how long the cluster took to be healthy
again (`-s`)."""

from __future__ import annotations

import contextlib
import pathlib
import shutil
import subprocess
import tempfile
import time

import pytest

from etcd_operator.core.cluster import builders, naming
from localkube import containerfaults, realnodes
from tests.support import chart_release, measured
from tests.support.cluster_members import ClusterMembers, newcomer, plaintext_cluster
from tests.support.clusters import condition, get_cluster, patch_spec, wait_healthy
from tests.support.diagnostics import print_operator_pod_logs
from tests.support.kubectl import kubectl
from tests.support.members_from_host import put, read_locally, replacement_event, url
from tests.support.waiting import wait_for, wait_for_holding

pytestmark = [pytest.mark.needs_nodes, pytest.mark.needs_release, pytest.mark.usefixtures("kubectl_on_real_nodes")]

OPERATOR_NAMESPACE = chart_release.NAMESPACE
NAMESPACE = "member-faults"
CLUSTER = "member"
UNHEALTHY_TIMEOUT_SECONDS = 30  # the CRD's minimum
MEMBERS = ClusterMembers(NAMESPACE, CLUSTER)


@pytest.fixture(scope="module")
def cluster(operator_release, kubectl_on_real_nodes):
    with plaintext_cluster(NAMESPACE, CLUSTER, UNHEALTHY_TIMEOUT_SECONDS) as name:
        yield name


@pytest.fixture
def spread(cluster):
    """Every test starts from three healthy members on three nodes."""
    wait_healthy(NAMESPACE, CLUSTER, 3, timeout=240)
    assert sorted(p["spec"]["nodeName"] for p in MEMBERS.live()) == realnodes.node_names()
    return cluster


def test_a_member_that_lost_its_data_is_replaced_on_the_node_left_without_a_member(spread):
    before = MEMBERS.identities()
    victim, node = MEMBERS.follower_away_from_the_operator()
    others = [url(p) for p in MEMBERS.live() if p["metadata"]["name"] != victim]
    key = "/member-faults/replaced"
    put(others, key, "written-before-the-data-loss")
    lost_at = time.monotonic()
    kubectl("delete", "pvc", naming.pvc_name(victim), "-n", NAMESPACE, "--wait=false")
    kubectl("delete", "pod", victim, "-n", NAMESPACE, "--wait=false")
    wait_for(MEMBERS.replaced(before, victim), 300, interval=2.0, what=f"{victim} replaced")
    wait_healthy(NAMESPACE, CLUSTER, 3, timeout=240)
    recovered_after = time.monotonic() - lost_at
    now = MEMBERS.identities()
    replacement = newcomer(before, now)
    assert now[replacement][1] == node, f"{replacement} landed on {now[replacement][1]}, {node} has no member"
    assert sorted(n for _, n in now.values()) == realnodes.node_names()
    assert any(m.startswith(replacement_event(victim, before[victim][0])) for m in MEMBERS.replacements())
    replacement_url = url(MEMBERS.pod(replacement))
    wait_for(
        lambda: read_locally(replacement_url, key) == "written-before-the-data-loss",
        60,
        interval=1.0,
        what=f"{replacement} holding the data",
    )
    measured.report(
        f"data loss of {victim} on {node}: replaced by {replacement} on {node}; "
        f"healthy again {recovered_after:.0f}s after the PVC was deleted"
    )


def mounted(path: pathlib.Path) -> bool:
    return subprocess.run(["mountpoint", "-q", str(path)]).returncode == 0


@contextlib.contextmanager
def nearly_full(path: pathlib.Path, headroom: int):
    """The folder's data moved onto a tmpfs with `headroom` left: a node disk about to fill up.
    Only a container started afterwards sees it (a bind mount is taken at start)."""
    stash = pathlib.Path(tempfile.mkdtemp(prefix=".full-", dir=path.parent))
    try:
        subprocess.run(["cp", "-a", f"{path}/.", str(stash)], check=True)
        mode = path.stat()
        subprocess.run(
            [
                "mount",
                "-t",
                "tmpfs",
                "-o",
                f"size=1g,mode={mode.st_mode & 0o7777:o},uid={mode.st_uid},gid={mode.st_gid}",
                "tmpfs",
                str(path),
            ],
            check=True,
        )
        # Not sparse: etcd preallocates its WAL segments (64 MiB each, read back as zeros); a
        # sparse copy would leave it that much to allocate again, beyond the headroom, as it starts.
        subprocess.run(["cp", "-a", "--sparse=never", f"{stash}/.", str(path)], check=True)
        used = int(
            subprocess.run(
                ["df", "--output=used", "-B1", str(path)], capture_output=True, text=True, check=True
            ).stdout.split()[1]
        )
        subprocess.run(["mount", "-o", f"remount,size={used + headroom}", str(path)], check=True)
        yield
    finally:
        if mounted(path):
            subprocess.run(["umount", "-l", str(path)], check=False)
        shutil.rmtree(stash, ignore_errors=True)


def test_a_member_whose_volume_fills_up_crashes_and_is_replaced_after_the_timeout(real_nodes, spread):
    before = MEMBERS.identities()
    victim, node = MEMBERS.follower_away_from_the_operator()
    others = [url(p) for p in MEMBERS.live() if p["metadata"]["name"] != victim]
    path = containerfaults.volume_path(real_nodes, NAMESPACE, naming.pvc_name(victim))
    patch_spec(NAMESPACE, CLUSTER, {"paused": True})
    try:
        wait_for(
            lambda: get_cluster(NAMESPACE, CLUSTER)["status"].get("phase") == "Paused",
            60,
            what="the cluster paused, so that the member's pod stays away while its data moves",
        )
        kubectl("delete", "pod", victim, "-n", NAMESPACE, "--wait=true", "--timeout=90s")
        with nearly_full(path, 8 << 20):
            patch_spec(NAMESPACE, CLUSTER, {"paused": False})
            wait_healthy(NAMESPACE, CLUSTER, 3, timeout=180)
            filling_at = time.monotonic()
            value = "x" * (512 * 1024)

            def restarts():
                statuses = MEMBERS.pod(victim)["status"].get("containerStatuses") or []
                return sum(s.get("restartCount", 0) for s in statuses)

            started_with = restarts()  # a restart before the writes is not the full volume's

            def crashed():
                return restarts() > started_with

            for index in range(200):  # 100 MiB at most; the tmpfs has 8 MiB left
                put(others, f"/member-faults/fill/{index}", value)  # quorum holds
                if crashed():
                    break
            assert crashed(), f"{victim} kept running on a full volume"
            crashed_after = time.monotonic() - filling_at

            def quorum_and_no_alarm():
                cluster = get_cluster(NAMESPACE, CLUSTER)
                assert (condition(cluster, "Alarm") or {}).get("status") != "True", condition(cluster, "Alarm")
                assert (condition(cluster, "Available") or {}).get("status") == "True", condition(cluster, "Available")

            removed = replacement_event(victim, before[victim][0])
            try:
                wait_for_holding(
                    lambda: any(m.startswith(removed) for m in MEMBERS.replacements()),
                    quorum_and_no_alarm,
                    # A restarted container inside its startup probe's budget is waited for
                    # (docs/reference/etcdcluster.md): the bound is the timeout plus that budget.
                    UNHEALTHY_TIMEOUT_SECONDS + builders.STARTUP_PROBE_PERIOD * builders.STARTUP_PROBE_FAILURES + 60,
                    interval=2.0,
                    what=f"{victim} on a full volume replaced",
                )
            except TimeoutError as e:
                print_operator_pod_logs(OPERATOR_NAMESPACE, tail=200)
                raise TimeoutError(f"{e}; {MEMBERS.where_things_stand(victim)}") from None
    finally:
        patch_spec(NAMESPACE, CLUSTER, {"paused": False})
    wait_for(MEMBERS.replaced(before, victim), 240, interval=2.0, what=f"a new member in place of {victim}")
    wait_healthy(NAMESPACE, CLUSTER, 3, timeout=300)
    recovered_after = time.monotonic() - filling_at
    now = MEMBERS.identities()
    replacement = newcomer(before, now)
    measured.report(
        f"full volume of {victim} on {node}: it crashed {crashed_after:.0f}s after the writes began; replaced by "
        f"{replacement} on {now[replacement][1]}, healthy again {recovered_after:.0f}s after the writes began"
    )
    assert sorted(n for _, n in now.values()) == realnodes.node_names()
