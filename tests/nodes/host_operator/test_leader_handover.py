"""Two operator replicas with leader election: the leader is frozen (SIGSTOP) in the middle
of a scale-up, the standby takes over and finishes it, and the old leader, once resumed,
sends not a single write: it exits, and etcd went through one change at a time. The replicas
are processes on the host against the real nodes (one can be frozen), the session's release
set aside."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import time

import pytest

from etcd_operator.__main__ import LOST_LEADERSHIP_EXIT_CODE
from tests.support import claims
from tests.support.cluster_checks import etcdctl, live_configuration
from tests.support.clusters import apply_cluster, member_endpoints, member_pods, patch_spec, wait_healthy
from tests.support.etcd_probes import MembershipLog, MembershipRecorder
from tests.support.kubectl import kubectl_json
from tests.support.operator_process import OperatorProcess
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.needs_nodes, pytest.mark.needs_operator_process, pytest.mark.lane5]

LEASE = claims.shard(claims.HOST_OPERATOR_SHARD).lease_name
RESUMED = "===== test: SIGCONT sent to this replica ====="
WRITE_TRACE = "etcd_operator.writes sending"  # LOG_WRITES=true: one line per write let through


def lease_holder(namespace: str) -> str:
    return (kubectl_json("get", "lease", LEASE, "-n", namespace).get("spec") or {}).get("holderIdentity") or ""


def replica(operator_process, namespace: str, identity: str) -> OperatorProcess:
    env = {"LEADER_ELECTION": "true", "POD_NAMESPACE": namespace, "LOG_WRITES": "true"}
    return operator_process(namespace, identity=identity, env=env)


def as_pid_1(process: OperatorProcess) -> None:
    """Runs the replica as PID 1 of a PID namespace of its own, as a container runs it."""
    process.command = ["unshare", "--pid", "--kill-child", "--", *process.command]


def pid_1_of(process: OperatorProcess) -> int:
    """The host's PID of the operator that `as_pid_1` started (unshare's forked child)."""
    pid = process.process.pid

    def operator_child() -> int | None:
        children = pathlib.Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        if children and b"etcd_operator" in pathlib.Path(f"/proc/{children[0]}/cmdline").read_bytes():
            return int(children[0])
        return None

    child = wait_for(operator_child, 30, what="the operator as PID 1 of its namespace")
    ns_pids = next(
        line for line in pathlib.Path(f"/proc/{child}/status").read_text().splitlines() if line.startswith("NSpid:")
    )
    assert ns_pids.split()[-1] == "1", ns_pids
    return child


def print_logs(*replicas: OperatorProcess) -> None:
    for r in replicas:
        if r.log_path.exists():
            print(f"----- tail of {r.log_path} -----\n{r.log_text()[-8000:]}")


def test_a_frozen_leader_is_replaced_mid_scale_up_and_never_writes_again(operator_process, namespace, container_faults):
    a, b = replica(operator_process, namespace, "replica-a"), replica(operator_process, namespace, "replica-b")
    recorder = None
    try:
        a.start()
        wait_for(lambda: lease_holder(namespace).startswith("replica-a_"), 60, what="replica-a leads")
        b.start()
        apply_cluster(namespace, "ha", {"size": 1, "storage": {"size": "1Gi"}})
        wait_healthy(namespace, "ha", 1)
        assert lease_holder(namespace).startswith("replica-a_")

        start = live_configuration(member_endpoints(namespace, "ha"))
        membership = MembershipLog(
            namespace, [p["metadata"]["name"] for p in member_pods(namespace, "ha")], container_faults.read_log
        ).mark()
        recorder = MembershipRecorder(lambda: member_endpoints(namespace, "ha"), interval=0.1).start()
        patch_spec(namespace, "ha", {"size": 3})
        wait_for(
            lambda: any(learner for s in recorder.samples for _, learner in s.members),
            120,
            interval=0.05,
            what="the first learner added by replica-a",
        )
        a.freeze()
        frozen_at = time.monotonic()

        wait_for(
            lambda: lease_holder(namespace).startswith("replica-b_"),
            120,
            interval=0.2,
            what="replica-b takes the lease",
        )
        print(f"\nreplica-b took the lease {time.monotonic() - frozen_at:.1f}s after replica-a was frozen")
        wait_healthy(namespace, "ha", 3, timeout=300)
        members_before = json.loads(etcdctl(member_endpoints(namespace, "ha"), "member", "list", "-w", "json"))[
            "members"
        ]
        pods_before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in member_pods(namespace, "ha")}

        a.mark_log(RESUMED)  # while it is stopped, so every line below it came after the resume
        a.resume()
        try:
            exit_code = a.wait_exit(60)
        except subprocess.TimeoutExpired:
            exit_code = None  # judged below, after what it did meanwhile
        before, after = a.log_text().rsplit(RESUMED, 1)
        assert WRITE_TRACE in before, "replica-a wrote nothing before the freeze: the trace proves nothing"
        assert WRITE_TRACE not in after, f"replica-a wrote after it resumed:\n{after}"
        assert "lost leadership" in after, after
        assert exit_code == LOST_LEADERSHIP_EXIT_CODE, f"replica-a did not exit as deposed:\n{after}"

        assert lease_holder(namespace).startswith("replica-b_") and b.exited() is None
        members = json.loads(etcdctl(member_endpoints(namespace, "ha"), "member", "list", "-w", "json"))["members"]
        assert members == members_before and len(members) == 3
        assert not any(m.get("isLearner") for m in members)
        assert len({m["name"] for m in members}) == len({m["peerURLs"][0] for m in members}) == 3
        assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in member_pods(namespace, "ha")} == pods_before
        recorder.stop()
        recorder = None
        configurations = membership.configurations(start, live_configuration(member_endpoints(namespace, "ha")))

        # A leader stopped on purpose (SIGTERM) stops kopf, then hands the Lease back.
        b.stop()
        assert b.exited() == 0
        assert lease_holder(namespace) == ""
    except BaseException:
        print_logs(a, b)
        raise
    finally:
        if recorder is not None:
            recorder.stop()
        a.stop()
        b.stop()

    # Every membership etcd went through, from its own record: never two learners, and
    # exactly the two members the scale-up needed were ever added (no duplicate add).
    assert len(configurations) == 5, configurations  # 1 voter, +learner, promoted, +learner, promoted
    assert max(sum(1 for _, learner in c if learner) for c in configurations) <= 1
    assert len({member_id for c in configurations for member_id, _ in c}) == 3
    assert {member_id for member_id, _ in configurations[-1]} == {int(m["ID"]) for m in members}


def test_a_standby_waiting_to_lead_stops_on_sigterm_as_pid_1(operator_process, namespace):
    """A rollout, a drain or `helm uninstall` sends SIGTERM to the standby too. In a container the
    operator is PID 1, for which the kernel ignores a signal it has no handler for: before kopf
    runs, a standby would go on waiting until the kubelet's SIGKILL at the end of the grace
    period (30 s for each such pod) and could take the Lease meanwhile. It stops at once."""
    a, b = replica(operator_process, namespace, "replica-a"), replica(operator_process, namespace, "replica-b")
    as_pid_1(b)
    try:
        a.start()
        wait_for(lambda: lease_holder(namespace).startswith("replica-a_"), 60, what="replica-a leads")
        b.start()
        wait_for(lambda: "waiting to lead" in b.log_text(), 30, what="replica-b waits to lead")
        os.kill(pid_1_of(b), signal.SIGTERM)
        try:
            exit_code = b.wait_exit(60)
        except subprocess.TimeoutExpired:
            exit_code = None
        assert exit_code == 0, f"the standby did not stop on SIGTERM:\n{b.log_text()[-3000:]}"
        assert "stopping while waiting to lead" in b.log_text()
        assert lease_holder(namespace).startswith("replica-a_") and a.exited() is None
    except BaseException:
        print_logs(a, b)
        raise
    finally:
        a.stop()
        b.stop()
