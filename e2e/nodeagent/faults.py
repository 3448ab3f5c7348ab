"""Fault injection for tests: these helpers talk to the running node agent over its
HTTP port (127.0.0.1 only) and read container logs from the state directory.

    from nodeagent import faults
    faults.crash_container("ns", "etcd-0")            # kill -9; restarts per restartPolicy
    faults.freeze_container("ns", "etcd-0"); faults.thaw_container("ns", "etcd-0")
    faults.lose_node("localkube-node-1"); faults.restore_node("localkube-node-1")
    faults.lose_disk("ns", "data-etcd-0")             # wipes the claim's directory
    faults.evict("ns", "etcd-0")                      # phase Failed, reason Evicted, never restarted
    faults.slow_stops("ns", 2.5)                      # deleted pods run 2.5 s before SIGTERM
    faults.read_log("ns", "etcd-0", "etcd")
"""

from __future__ import annotations

import functools
import json
import urllib.error
import urllib.request

from localkube import layout as localkube_layout
from nodeagent.paths import Paths

TIMEOUT = 30


class FaultFailed(RuntimeError):
    pass


@functools.cache
def _current_layout() -> localkube_layout.Layout:
    return localkube_layout.current()


def _layout(where: localkube_layout.Layout | None) -> localkube_layout.Layout:
    return where or _current_layout()


def _call(method: str, path: str, body: dict | None = None, where=None) -> dict:
    port = _layout(where).ports.node_agent
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=data,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as e:
        detail = e.read().decode(errors="replace")
        raise FaultFailed(f"{method} {path}: {e.code} {detail}") from None


def _container_fault(action: str, namespace: str, pod: str, container: str | None, where) -> int:
    body = {"namespace": namespace, "pod": pod}
    if container:
        body["container"] = container
    return _call("POST", f"/faults/{action}", body, where)["pid"]


def crash_container(namespace: str, pod: str, container: str | None = None, where=None) -> int:
    """kill -9 of the container's process group; returns the pid that was killed."""
    return _container_fault("crash", namespace, pod, container, where)


def freeze_container(namespace: str, pod: str, container: str | None = None, where=None) -> int:
    """SIGSTOP to the container's process group (probes then time out)."""
    return _container_fault("freeze", namespace, pod, container, where)


def thaw_container(namespace: str, pod: str, container: str | None = None, where=None) -> int:
    """SIGCONT to the container's process group."""
    return _container_fault("thaw", namespace, pod, container, where)


def lose_node(node: str, where=None) -> list[str]:
    """The node dies: its pods' processes are killed, its Lease and status stop, and the
    node lifecycle controller marks it NotReady after its grace period (20 s).
    Returns the pods that were running there."""
    return _call("POST", "/faults/lose-node", {"node": node}, where)["pods"]


def restore_node(node: str, where=None) -> None:
    """The node comes back: heartbeats resume and its pods' containers restart."""
    _call("POST", "/faults/restore-node", {"node": node}, where)


def lose_disk(namespace: str, claim: str, where=None) -> str:
    """Wipes the directory behind a PersistentVolumeClaim (whether or not a pod runs);
    returns the directory."""
    return _call("POST", "/faults/lose-disk", {"namespace": namespace, "claim": claim}, where)["path"]


def evict(namespace: str, pod: str, message: str | None = None, grace: int | None = None, where=None) -> dict:
    """Ends the pod as a kubelet eviction or a graceful node shutdown does: SIGTERM to its
    containers, SIGKILL after `grace` (default: terminationGracePeriodSeconds), then
    phase Failed, reason Evicted, `message`; it is never restarted and the object stays
    until someone deletes it. Volumes are untouched. Returns at once with
    {pod, uid, grace}; wait for the phase to see the end."""
    body: dict = {"namespace": namespace, "pod": pod}
    if message:
        body["message"] = message
    if grace is not None:
        body["grace"] = grace
    return _call("POST", "/faults/evict", body, where)


def slow_stops(namespace: str, seconds: float, where=None) -> None:
    """From now on, a pod of `namespace` that is deleted keeps running `seconds` (at most its
    grace period) before its containers get SIGTERM, as on a busy node; 0 ends this."""
    _call("POST", "/faults/slow-stops", {"namespace": namespace, "seconds": seconds}, where)


def pod_info(namespace: str, pod: str, where=None) -> dict:
    """{uid, node, ip, containers: {name: {pid, restartCount, init}}} as the agent sees it."""
    return _call("GET", f"/pods/{namespace}/{pod}", None, where)


def container_pid(namespace: str, pod: str, container: str, where=None) -> int | None:
    return pod_info(namespace, pod, where)["containers"][container]["pid"]


def read_log(namespace: str, pod: str, container: str, where=None) -> str:
    """The container's output (stdout and stderr, appended across restarts); "" if none."""
    path = Paths(_layout(where).state_dir).log_file(namespace, pod, container)
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
