"""Imports archives into a containerd with `ctr`, and runs a throwaway containerd (its own
root, state, socket and config under one directory) to prove that they import and run."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time

NAMESPACE = "k8s.io"  # the namespace the CRI (and so the kubelet) looks in
START_TIMEOUT = 30.0


class ContainerdError(Exception):
    pass


def ctr(address: str | pathlib.Path, *args: str, timeout: float = 300.0) -> str:
    done = subprocess.run(
        ["ctr", "--address", str(address), "--namespace", NAMESPACE, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise ContainerdError(f"ctr {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def import_archive(address: str | pathlib.Path, archive: pathlib.Path, base_name: str | None = None) -> str:
    """Imports an OCI archive; `base_name` names images whose index gives only a tag
    (`org.opencontainers.image.ref.name`) as `<base_name>:<tag>`."""
    args = ["images", "import"]
    if base_name:
        args += ["--base-name", base_name]
    return ctr(address, *args, str(archive))


def image_names(address: str | pathlib.Path) -> list[str]:
    listed = ctr(address, "images", "ls", "--quiet")
    return sorted(line for line in listed.splitlines() if line.strip())


def image_digests(address: str | pathlib.Path) -> dict[str, str]:
    """Each image's name and the digest of what it points at (its index or manifest)."""
    rows = ctr(address, "images", "ls").splitlines()[1:]
    return {row.split()[0]: row.split()[2] for row in rows if len(row.split()) >= 3}


def archive_digest(archive: pathlib.Path) -> str:
    """The digest an archive's image gets on import: its index.json's first manifest."""
    with tarfile.open(archive) as tar:
        names = [m for m in tar.getmembers() if m.name.lstrip("./") == "index.json"]
        member = tar.extractfile(names[0]) if names else None
        if member is None:
            raise ContainerdError(f"{archive} has no index.json")
        index = json.load(member)
    return index["manifests"][0]["digest"]


CONFIG = """version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.grpc.v1.cri"]

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{socket}.ttrpc"
"""


class Throwaway:
    """A containerd of its own under `base` (a short path: the socket path is limited to
    108 bytes), without the CRI plugin. Use as a context manager."""

    def __init__(self, base: pathlib.Path):
        self.base = base
        self.socket = base / "containerd.sock"
        self.log = base / "containerd.log"
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> Throwaway:
        if not shutil.which("containerd"):
            raise ContainerdError("containerd is missing (apt-get install containerd)")
        self.base.mkdir(parents=True, exist_ok=True)
        config = self.base / "config.toml"
        config.write_text(CONFIG.format(root=self.base / "root", state=self.base / "state", socket=self.socket))
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                ["containerd", "--config", str(config)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self._wait_serving()
        return self

    def _wait_serving(self):
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.process.poll() is not None:
                raise ContainerdError(f"containerd exited ({self.process.returncode}); log: {self.log}")
            if self.socket.exists():
                try:
                    ctr(self.socket, "version", timeout=5)
                    return
                except (ContainerdError, subprocess.TimeoutExpired):
                    pass
            if time.monotonic() > deadline:
                raise ContainerdError(f"containerd did not serve within {START_TIMEOUT}s; log: {self.log}")
            time.sleep(0.1)

    def __exit__(self, *exc):
        if self.process and self.process.poll() is None:
            self._remove_containers()
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        # Shims outlive their containerd by design; these are this containerd's only.
        for pid in self._shims():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for mount in self._mounts():
            subprocess.run(["umount", "--lazy", mount], capture_output=True)

    def _remove_containers(self):
        try:
            listed = ctr(self.socket, "containers", "ls", "--quiet", timeout=20).split()
            for container in listed:
                if self._has_task(container):
                    ctr(self.socket, "tasks", "delete", "--force", container, timeout=20)
                ctr(self.socket, "containers", "delete", container, timeout=20)
        except (ContainerdError, subprocess.TimeoutExpired):
            pass  # the shims and mounts are cleaned up below all the same

    def _has_task(self, container: str) -> bool:
        rows = ctr(self.socket, "tasks", "ls", timeout=20).splitlines()[1:]
        return any(row.split()[:1] == [container] for row in rows)

    def _shims(self) -> list[int]:
        pids = []
        for cmdline in pathlib.Path("/proc").glob("[0-9]*/cmdline"):
            try:
                argv = cmdline.read_bytes().split(b"\0")
            except OSError:
                continue
            if b"-address" in argv and str(self.socket).encode() in argv and b"shim" in argv[0]:
                pids.append(int(cmdline.parent.name))
        return pids

    def _mounts(self) -> list[str]:
        """Mount points under base, deepest first."""
        points = [line.split()[1] for line in pathlib.Path("/proc/mounts").read_text().splitlines()]
        return sorted((point for point in points if point.startswith(str(self.base) + "/")), reverse=True)

    def run(
        self, image: str, name: str, *command: str, read_only: bool = False, timeout: float = 60.0
    ) -> subprocess.CompletedProcess:
        """`ctr run --rm` of one container as the image's user; its output (stdout and stderr
        together) and exit code. The shim hands the container a file as its output
        (`--log-uri file://`), so nothing goes through fifos: ctr can exit 0 before it has
        copied a short-lived container's output (seen on a loaded machine: exit 0, nothing
        printed)."""
        with tempfile.TemporaryDirectory() as scratch:
            output = pathlib.Path(scratch) / "output"
            args = ["ctr", "--address", str(self.socket), "--namespace", NAMESPACE, "run", "--rm"]
            args += ["--log-uri", f"file://{output}"]
            if read_only:
                args += ["--read-only"]
            args += [image, name, *command]
            done = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
            printed = output.read_text() if output.exists() else ""
        return subprocess.CompletedProcess(done.args, done.returncode, printed, done.stderr)
