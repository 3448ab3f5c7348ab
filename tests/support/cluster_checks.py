"""What the scenario tests check of a plaintext cluster, dialled by its members' pod IPs
(routed from the host on the real nodes): the member list, keys
under a prefix, the acknowledged writes kept, and a member pod's restarts."""

from __future__ import annotations

import base64
import json
import subprocess

from tests.support import members_from_host
from tests.support.etcd_probes import AckedWriter
from tests.support.kubectl import kubectl_json


def etcdctl(endpoints: list[str], *args: str) -> str:
    """etcdctl's output; a failed call raises."""
    done = members_from_host.etcdctl(endpoints, *args)
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, ["etcdctl", *args], done.stdout, done.stderr)
    return done.stdout


def read_prefix(endpoints: list[str], prefix: str) -> dict[str, str]:
    kvs = json.loads(etcdctl(endpoints, "get", "--prefix", prefix, "-w", "json")).get("kvs") or []
    return {base64.b64decode(kv["key"]).decode(): base64.b64decode(kv["value"]).decode() for kv in kvs}


def assert_all_acked_writes_present(endpoints: list[str], writer: AckedWriter) -> None:
    stored = read_prefix(endpoints, writer.prefix)
    missing = [n for n in writer.acked if stored.get(f"{writer.prefix}{n:08}") != str(n)]
    assert writer.acked, "the writer never got a write acknowledged"
    assert not missing, f"{len(missing)} acknowledged writes lost, e.g. {missing[:5]}"


def live_configuration(endpoints: list[str]) -> frozenset[tuple[int, bool]]:
    """(member ID, is learner) of each member in the list."""
    listed = json.loads(etcdctl(endpoints, "member", "list", "-w", "json"))["members"]
    return frozenset((int(m["ID"]), bool(m.get("isLearner"))) for m in listed)


def pod_of(namespace: str, name: str) -> dict:
    return kubectl_json("get", "pod", name, "-n", namespace)


def restart_count(pod: dict) -> int:
    return sum(c.get("restartCount", 0) for c in (pod.get("status") or {}).get("containerStatuses") or [])
