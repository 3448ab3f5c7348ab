"""`localkube up` on running real nodes leaves a daemon's configuration file alone when its
content is the same: kube-proxy exits as soon as its file changes."""

from __future__ import annotations

import os

from localkube import realnodes


def test_the_same_content_is_not_written_again_and_new_content_replaces_the_file(tmp_path):
    path = tmp_path / "kube-proxy.yaml"
    realnodes._write_if_changed(path, "mode: iptables\n")
    os.utime(path, ns=(1, 1))
    inode = path.stat().st_ino
    realnodes._write_if_changed(path, "mode: iptables\n")
    assert path.stat().st_mtime_ns == 1 and path.stat().st_ino == inode
    realnodes._write_if_changed(path, "mode: nftables\n")
    assert path.read_text() == "mode: nftables\n" and path.stat().st_ino != inode  # replaced whole, never truncated
    assert [p.name for p in tmp_path.iterdir()] == ["kube-proxy.yaml"]
