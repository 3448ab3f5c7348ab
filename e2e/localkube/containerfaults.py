"""Container faults for real nodes (`up`), through the pod's node's containerd:

    crash(layout, "ns", "etcd-0", "etcd")      SIGKILL to the container's process; the kubelet restarts it
    freeze(...), thaw(...)                     the container's cgroup frozen (runc pause) and thawed
    pid(...)                                   the container's process on the host, or None
    read_log(...)                              its output across restarts, from the kubelet's files
    flood_log(..., size)                       its log folder grown by `size` bytes, as a flooding log
    lose_disk(layout, "ns", "data-etcd-0")     empties the local-path folder behind a claim
    lose_member_disk(layout, "ns", "etcd-0", "etcd")   both: its claim's folder emptied, its process killed

Each reads the pod (its node and container ID) or the claim's volume from the API server.
"""

from __future__ import annotations

import pathlib
import re
import shutil

from images import containerd
from localkube import realnodes
from localkube.layout import Layout

# The kubelet's CRI log line: "<RFC 3339 time> <stream> <P|F> <text>"; P is a partial line.
_CRI_LINE = re.compile(r"^\S+ (?:stdout|stderr) ([PF]) ?(.*)$")


class ContainerFaultFailed(RuntimeError):
    pass


def _get(layout: Layout, path: str) -> dict:
    found = realnodes.api_get(layout, path)
    if found is None or found.get("kind") == "Status":
        raise ContainerFaultFailed(f"GET {path}: {found and found.get('message')}")
    return found


def _pod(layout: Layout, namespace: str, pod: str) -> dict:
    return _get(layout, f"/api/v1/namespaces/{namespace}/pods/{pod}")


def _node_index(pod: dict) -> int:
    node = pod["spec"].get("nodeName") or ""
    if node not in realnodes.node_names():
        raise ContainerFaultFailed(f"{pod['metadata']['name']} is on no real node ({node!r})")
    return int(node.rsplit("-", 1)[1])


def _container_status(pod: dict, container: str | None) -> dict:
    statuses = pod.get("status", {}).get("containerStatuses") or []
    for status in statuses:
        if container in (None, status["name"]):
            return status
    raise ContainerFaultFailed(f"{pod['metadata']['name']} has no container {container!r} running")


def _task(layout: Layout, namespace: str, pod: str, container: str | None) -> tuple[pathlib.Path, str]:
    """The containerd socket of the pod's node and the container's ID there."""
    found = _pod(layout, namespace, pod)
    container_id = _container_status(found, container).get("containerID") or ""
    if not container_id.startswith("containerd://"):
        raise ContainerFaultFailed(f"{namespace}/{pod} {container}: no container started yet")
    return realnodes.containerd_socket(layout, _node_index(found)), container_id.removeprefix("containerd://")


def _task_pid(socket: pathlib.Path, container_id: str) -> int | None:
    for row in containerd.ctr(socket, "tasks", "ls", timeout=30).splitlines()[1:]:
        fields = row.split()
        if len(fields) >= 3 and fields[0] == container_id and fields[2] != "STOPPED":
            return int(fields[1])
    return None


def pid(layout: Layout, namespace: str, pod: str, container: str | None = None) -> int | None:
    return _task_pid(*_task(layout, namespace, pod, container))


def crash(layout: Layout, namespace: str, pod: str, container: str | None = None) -> int:
    """SIGKILL to the container's main process, as an OOM kill would; returns its pid."""
    socket, container_id = _task(layout, namespace, pod, container)
    killed = _task_pid(socket, container_id)
    if killed is None:
        raise ContainerFaultFailed(f"{namespace}/{pod} {container}: no running process to kill")
    _sigkill(socket, container_id)
    return killed


def _sigkill(socket: pathlib.Path, container_id: str) -> None:
    containerd.ctr(socket, "tasks", "kill", "--signal", "SIGKILL", container_id, timeout=30)


def freeze(layout: Layout, namespace: str, pod: str, container: str | None = None) -> None:
    """Freezes the container's cgroup: it keeps its sockets and answers nothing, as a hung
    process would (probes then time out)."""
    socket, container_id = _task(layout, namespace, pod, container)
    containerd.ctr(socket, "tasks", "pause", container_id, timeout=30)


def thaw(layout: Layout, namespace: str, pod: str, container: str | None = None) -> None:
    socket, container_id = _task(layout, namespace, pod, container)
    containerd.ctr(socket, "tasks", "resume", container_id, timeout=30)


def _log_folder(layout: Layout, namespace: str, found: dict, container: str) -> pathlib.Path:
    """Where the pod's node's kubelet keeps the container's log files."""
    meta = found["metadata"]
    return (
        realnodes.node_dir(layout, _node_index(found))
        / "pod-logs"
        / f"{namespace}_{meta['name']}_{meta['uid']}"
        / container
    )


def flood_log(layout: Layout, namespace: str, pod: str, container: str, size: int) -> pathlib.Path:
    """Writes `size` bytes of real data (not a sparse file) into the container's log folder,
    beside its `<restart>.log` files, as a container flooding its log would: the kubelet counts
    the folder toward the container's ephemeral storage. Returns the file."""
    folder = _log_folder(layout, namespace, _pod(layout, namespace, pod), container)
    if not folder.is_dir():
        raise ContainerFaultFailed(f"{namespace}/{pod}: no log folder for {container!r} at {folder}")
    flood = folder / "flood"
    chunk = b"x" * (1 << 20)
    with open(flood, "wb") as file:
        for _ in range(size >> 20):
            file.write(chunk)
        file.write(b"x" * (size & ((1 << 20) - 1)))
    return flood


def read_log(layout: Layout, namespace: str, pod: str, container: str) -> str:
    """The container's output (stdout and stderr) across its restarts, as the kubelet wrote
    it (its files `<restart>.log`, CRI prefixes taken off); "" before it started."""
    try:
        found = _pod(layout, namespace, pod)
    except ContainerFaultFailed:
        return ""
    if not found["spec"].get("nodeName"):
        return ""
    folder = _log_folder(layout, namespace, found, container)
    files = sorted(folder.glob("*.log"), key=lambda f: int(f.stem) if f.stem.isdigit() else -1)
    lines, partial = [], ""
    for file in files:
        for raw in file.read_text(errors="replace").splitlines():
            match = _CRI_LINE.match(raw)
            if not match:
                continue
            tag, text = match.groups()
            if tag == "P":
                partial += text
            else:
                lines.append(partial + text)
                partial = ""
    return "".join(f"{line}\n" for line in lines)


def volume_path(layout: Layout, namespace: str, claim: str) -> pathlib.Path:
    """The folder on the host behind a bound claim (the nodes share the host's mounts)."""
    bound = _get(layout, f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{claim}")
    volume = bound["spec"].get("volumeName")
    if not volume:
        raise ContainerFaultFailed(f"{namespace}/{claim} is not bound")
    source = _get(layout, f"/api/v1/persistentvolumes/{volume}")["spec"]
    return pathlib.Path((source.get("hostPath") or source.get("local"))["path"])


def lose_disk(layout: Layout, namespace: str, claim: str) -> str:
    """Deletes everything in the claim's folder, whether or not a pod runs on it (the folder
    stays, as a replaced disk mounted at the same place would); returns the folder."""
    folder = volume_path(layout, namespace, claim)
    for entry in folder.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    return str(folder)


def lose_member_disk(layout: Layout, namespace: str, pod: str, container: str) -> None:
    """A failed disk under a running member: the folder of the pod's one claim emptied, then
    the container's process killed so it restarts on the empty folder. A process that touched
    the emptied folder may have exited on its own before the kill; that is the same outcome."""
    claims = [
        v["persistentVolumeClaim"]["claimName"]
        for v in _pod(layout, namespace, pod)["spec"].get("volumes") or []
        if v.get("persistentVolumeClaim")
    ]
    if len(claims) != 1:
        raise ContainerFaultFailed(f"{namespace}/{pod} has {len(claims)} claims, not one disk: {claims}")
    lose_disk(layout, namespace, claims[0])
    socket, container_id = _task(layout, namespace, pod, container)
    if _task_pid(socket, container_id) is not None:
        _sigkill(socket, container_id)
