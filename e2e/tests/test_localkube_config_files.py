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


def test_node_containerd_pulls_from_the_local_registry_over_plain_http_only(tmp_path):
    import tomllib

    from localkube import layout

    where = layout.Layout(
        root=tmp_path, checkout_id="t", ports=layout.Ports.from_base(20000), pod_subnet_octet=9, testbin=tmp_path
    )
    config = tomllib.loads(realnodes._write_containerd_config(where, 1).read_text())
    hosts_dir = config["plugins"]["io.containerd.grpc.v1.cri"]["registry"]["config_path"]
    registry = f"10.1.0.1:{where.ports.registry}"
    assert [p.name for p in os.scandir(hosts_dir)] == [registry]
    hosts = tomllib.loads((tmp_path / hosts_dir / registry / "hosts.toml").read_text())
    assert hosts == {
        "server": f"http://{registry}",
        "host": {f"http://{registry}": {"capabilities": ["pull", "resolve"]}},
    }
