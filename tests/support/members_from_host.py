"""A plaintext cluster's members as the host reaches them on real nodes: by pod IP, with the
testbin's etcdctl, whoever owns /etc/resolv.conf; and the MemberReplaced event's wording."""

from __future__ import annotations

import subprocess

from etcd_operator.core.cluster import naming
from localkube import layout as localkube_layout
from tests.support.waiting import wait_for


def url(pod: dict) -> str:
    return f"http://{pod['status']['podIP']}:{naming.CLIENT_PORT}"


def etcdctl(urls: list[str], *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    binary = localkube_layout.testbin_dir() / "etcd-3.6" / "etcdctl"
    return subprocess.run(
        [str(binary), f"--endpoints={','.join(urls)}", "--command-timeout=5s", "--dial-timeout=3s", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
    )


def put(urls: list[str], key: str, value: str) -> None:
    """The value goes through stdin: large ones exceed an argument's size limit."""
    written = wait_for(
        lambda: etcdctl(urls, "put", key, stdin=value).returncode == 0,
        60,
        interval=1.0,
        what=f"{key} written through {urls}",
    )
    assert written


def read_locally(member_url: str, key: str) -> str | None:
    """What this one member has applied: a serializable read is answered from its own data."""
    read = etcdctl([member_url], "get", key, "--consistency=s", "--print-value-only")
    return read.stdout.strip() if read.returncode == 0 else None


def replacement_event(victim: str, member_id: str) -> str:
    """The start of the MemberReplaced event the operator posts for this very member."""
    return f"Removed {victim} (id {int(member_id, 16):x})"
