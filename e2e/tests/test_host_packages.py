"""hack/host-packages.sh, the one list of Debian packages `make up`, `make demo` and `make test`
install before building anything: what it checks, and what a user without root is told."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import tempfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "hack" / "host-packages.sh"

pytestmark = pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="not a Debian-based machine")


def listed() -> list[str]:
    return subprocess.run([str(SCRIPT), "--list"], capture_output=True, text=True, check=True).stdout.split()


def owning_package(command: str) -> str:
    """The Debian package that installed `command` (dpkg -S on its resolved path)."""
    path = shutil.which(command)
    assert path, f"{command} is not installed"
    # The path as found (gcc is the gcc package's link to gcc-12), its usr-merge twin, then
    # the file its links lead to (iptables through /etc/alternatives).
    real = os.path.realpath(path)
    for candidate in (path, path.replace("/usr/bin/", "/bin/").replace("/usr/sbin/", "/sbin/"), real):
        found = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
        if found.returncode == 0:
            return found.stdout.split(":", 1)[0]
    raise AssertionError(f"no Debian package owns {path}")


# The host commands the real nodes and the image builds call (e2e/localkube/realnodes.py,
# e2e/images, packaging/image/build.sh); each must come from a listed package.
HOST_COMMANDS = ["ctr", "containerd", "runc", "iptables", "conntrack", "ethtool", "socat", "gcc", "mmdebstrap"]


@pytest.mark.parametrize("command", HOST_COMMANDS)
def test_each_host_command_the_nodes_call_comes_from_a_listed_package(command):
    assert owning_package(command) in listed()


def test_the_cni_plugins_and_busybox_come_from_listed_packages():
    assert pathlib.Path("/usr/lib/cni/bridge").exists() and "containernetworking-plugins" in listed()
    assert "busybox-static" in listed()


def test_nothing_is_done_when_every_package_is_installed():
    ran = subprocess.run([str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert (ran.returncode, ran.stderr) == (0, "")


def test_without_root_a_missing_package_stops_with_the_one_command_to_run():
    # A dpkg-query that reports one listed package missing, first on PATH; run as nobody, who
    # must reach it (pytest's own temporary folders are the invoking user's alone).
    with tempfile.TemporaryDirectory(prefix="host-packages-") as folder:
        os.chmod(folder, 0o755)
        fake = pathlib.Path(folder) / "dpkg-query"
        fake.write_text(
            '#!/bin/sh\nfor last; do :; done\n[ "$last" = socat ] && { echo not-installed; exit 0; }\n'
            'exec /usr/bin/dpkg-query "$@"\n'
        )
        fake.chmod(0o755)
        env = {**os.environ, "PATH": f"{folder}:{os.environ['PATH']}"}
        command = [str(SCRIPT)]
        if os.geteuid() == 0:
            command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command]
        ran = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    assert ran.returncode == 1
    assert "sudo apt-get update && sudo apt-get install -y --no-install-recommends socat" in ran.stderr
