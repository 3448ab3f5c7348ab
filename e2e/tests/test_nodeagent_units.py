"""The node agent's pure parts: $(VAR) expansion, the image map, placement, the hosts
file block, name records, address allocation and the wildcard-bind rewrite. No control plane needed."""

from __future__ import annotations

import pathlib
import sys

import pytest

from nodeagent import envvars, hostsfile, images, ipam, names, placement, wildcard

# --- $(VAR) expansion ------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("$(A)", "alpha"),
        ("x-$(A)-y", "x-alpha-y"),
        ("$$(A)", "$(A)"),
        ("$$$(A)", "$alpha"),
        ("$(MISSING)", "$(MISSING)"),
        ("$(A", "$(A"),
        ("$A", "$A"),
        ("cost: 5$", "cost: 5$"),
        ("$()", "$()"),
        ("$(A)$(B)", "alphabeta"),
    ],
)
def test_expansion_follows_kubernetes_rules(text, expected):
    env = {"A": "alpha", "B": "beta"}
    assert envvars.expand(text, env.get) == expected


# --- image map -------------------------------------------------------------------------


def _testbin(tmp_path: pathlib.Path) -> pathlib.Path:
    for minor in ("3.5", "3.6"):
        d = tmp_path / f"etcd-{minor}"
        d.mkdir()
        for tool in ("etcd", "etcdctl", "etcdutl"):
            (d / tool).write_text("")
    return tmp_path


@pytest.mark.parametrize(
    "image, minor",
    [
        ("quay.io/coreos/etcd:v3.5.35", "3.5"),
        ("registry.k8s.io/etcd:3.5.12-0", "3.5"),
        ("gcr.io/etcd-development/etcd:v3.6.16", "3.6"),
        ("localhost:5000/mirror/etcd:v3.6.0@sha256:abc", "3.6"),
    ],
)
def test_etcd_images_map_to_testbin_minor(tmp_path, image, minor):
    runtime = images.resolve(image, _testbin(tmp_path))
    assert runtime.kind == "etcd"
    assert runtime.path.startswith(str(tmp_path / f"etcd-{minor}") + ":")
    argv = runtime.argv(["/usr/local/bin/etcdutl", "snapshot", "status"], None, "127.1.1.2")
    assert argv == [str(tmp_path / f"etcd-{minor}" / "etcdutl"), "snapshot", "status"]
    assert runtime.argv(None, ["etcdctl", "get", "k"], "127.1.1.2")[0] == str(tmp_path / f"etcd-{minor}" / "etcdctl")


def test_pinned_old_patch_runs_its_own_recipe(tmp_path):
    testbin = _testbin(tmp_path)
    (testbin / "etcd-3.5-old").mkdir()
    (testbin / "etcd-3.5-old" / "etcd").write_text("")
    assert images.resolve("gcr.io/etcd-development/etcd:v3.5.21", testbin).bin_dir == testbin / "etcd-3.5-old"
    assert images.resolve("gcr.io/etcd-development/etcd:v3.5.22", testbin).bin_dir == testbin / "etcd-3.5"


def test_bare_etcd_image_listens_on_pod_ip(tmp_path):
    argv = images.resolve("quay.io/coreos/etcd:v3.5.35", _testbin(tmp_path)).argv(None, None, "127.1.1.9")
    assert argv[0].endswith("etcd-3.5/etcd")
    assert "--listen-client-urls=http://127.1.1.9:2379" in argv


@pytest.mark.parametrize(
    "image",
    [
        "quay.io/coreos/etcd:v3.4.30",  # minor not built
        "quay.io/coreos/etcd:latest",
        "quay.io/coreos/etcd",
        "nginx:1.27",
        "ghcr.io/someone/etcd-operator-helper:1",
    ],
)
def test_unknown_images(tmp_path, image):
    with pytest.raises(images.UnknownImage):
        images.resolve(image, _testbin(tmp_path))


@pytest.mark.parametrize("image", ["ghcr.io/etcd-operator/etcd-operator:0.1.0", "etcd-operator:dev"])
def test_operator_image_runs_this_python(tmp_path, image):
    runtime = images.resolve(image, _testbin(tmp_path))
    assert runtime.argv(None, None, "ip") == [sys.executable, "-m", "etcd_operator"]
    assert runtime.argv(["python3", "-c", "pass"], None, "ip") == [sys.executable, "-c", "pass"]
    assert runtime.argv(None, ["--verbose"], "ip") == [sys.executable, "-m", "etcd_operator", "--verbose"]
    assert dict(runtime.env)["PYTHONPATH"]


@pytest.mark.parametrize("image", ["busybox", "busybox:1.36", "docker.io/library/busybox:latest"])
def test_busybox_runs_host_shell(tmp_path, image):
    runtime = images.resolve(image, _testbin(tmp_path))
    assert runtime.argv(None, None, "ip") == ["sh"]
    assert runtime.argv(["busybox", "sh", "-c", "true"], None, "ip") == ["sh", "-c", "true"]


# --- placement -------------------------------------------------------------------------


def _node(name: str, **labels) -> dict:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}}, "spec": {}}


def _pod(name: str, labels=None, **spec) -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "labels": labels or {}}, "spec": spec, "status": {}}


ANTI = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}
        ]
    }
}


def test_anti_affinity_spreads_and_then_refuses():
    nodes = {n: _node(n) for n in ("a", "b")}
    placed: dict = {}
    chosen = []
    for i in range(2):
        pod = _pod(f"db-{i}", {"app": "db"}, affinity=ANTI)
        name, _ = placement.choose_node(pod, nodes, placed)
        chosen.append(name)
        placed.setdefault(name, []).append({**pod, "spec": {**pod["spec"], "nodeName": name}})
    assert sorted(chosen) == ["a", "b"]
    name, why = placement.choose_node(_pod("db-2", {"app": "db"}, affinity=ANTI), nodes, placed)
    assert name is None and "0/2 nodes are available" in why and "anti-affinity" in why


def test_node_selector_and_taints():
    nodes = {"a": _node("a", disk="ssd"), "b": _node("b")}
    assert placement.choose_node(_pod("p", nodeSelector={"disk": "ssd"}), nodes, {})[0] == "a"
    assert placement.choose_node(_pod("p", nodeSelector={"disk": "nvme"}), nodes, {})[0] is None
    nodes["a"]["spec"]["taints"] = [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]
    assert placement.choose_node(_pod("p", nodeSelector={"disk": "ssd"}), nodes, {})[0] is None
    tolerant = _pod("p", nodeSelector={"disk": "ssd"}, tolerations=[{"key": "dedicated", "operator": "Exists"}])
    assert placement.choose_node(tolerant, nodes, {})[0] == "a"


def test_spread_prefers_emptier_nodes():
    nodes = {n: _node(n) for n in ("a", "b", "c")}
    placed = {"a": [_pod("x")], "b": [_pod("y")]}
    assert placement.choose_node(_pod("z"), nodes, placed)[0] == "c"


# --- hosts file and names --------------------------------------------------------------


def test_hosts_block_is_replaced_in_place_and_removed(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("127.0.0.1 localhost\n# BEGIN localkube other (managed)\n1.2.3.4 x\n# END localkube other\n")
    hosts = hostsfile.HostsFile(path, "abc")
    inode = path.stat().st_ino
    hosts.write({"a.ns.svc": {"127.1.1.2", "127.1.1.3"}, "b.ns.svc": {"127.1.1.2"}})
    text = path.read_text()
    assert "127.1.1.2 a.ns.svc b.ns.svc" in text and "127.1.1.3 a.ns.svc" in text
    assert "1.2.3.4 x" in text  # another checkout's block stays
    hosts.write({"c.ns.svc": {"127.1.1.4"}})
    assert "a.ns.svc" not in path.read_text() and text.count("# BEGIN localkube abc") == 1
    hosts.remove()
    assert "localkube abc" not in path.read_text() and "1.2.3.4 x" in path.read_text()
    assert path.stat().st_ino == inode


def test_name_records_for_pods_and_services():
    def pod(name, ip, ready, **spec):
        return {
            "metadata": {"name": name, "namespace": "ns", "uid": name, "labels": {"app": "db"}},
            "spec": spec,
            "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
        }

    pods = [
        pod("etcd-0", "127.1.1.2", True, subdomain="etcd"),
        pod("etcd-1", "127.1.1.3", False, subdomain="etcd"),
        pod("p", None, False, hostname="h", subdomain="sub"),
    ]
    services = [
        {"metadata": {"name": "etcd", "namespace": "ns"}, "spec": {"clusterIP": "None", "selector": {"app": "db"}}},
        {
            "metadata": {"name": "all", "namespace": "ns"},
            "spec": {"publishNotReadyAddresses": True, "selector": {"app": "db"}},
        },
        {"metadata": {"name": "manual", "namespace": "ns"}, "spec": {}},
        {"metadata": {"name": "other", "namespace": "elsewhere"}, "spec": {"selector": {"app": "db"}}},
    ]
    slices = [
        {
            "metadata": {"namespace": "ns", "labels": {"kubernetes.io/service-name": "manual"}},
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.1.1.1"], "conditions": {"ready": True}},
                {"addresses": ["10.1.1.2"], "conditions": {"ready": False}},
            ],
        }
    ]
    out = names.records(pods, services, slices, pod_ips={"p": "127.1.1.9"})
    assert out["etcd-0.etcd.ns.svc"] == {"127.1.1.2"}
    assert out["etcd-1.etcd.ns.svc.cluster.local"] == {"127.1.1.3"}
    assert out["h.sub.ns.svc"] == {"127.1.1.9"}
    assert out["etcd.ns.svc"] == {"127.1.1.2"}
    assert out["all.ns.svc.cluster.local"] == {"127.1.1.2", "127.1.1.3", "127.1.1.9"}
    assert out["manual.ns.svc"] == {"10.1.1.1"}
    assert "other.elsewhere.svc" not in out


def test_ip_pool_avoids_odd_addresses_and_persists(tmp_path):
    pool = ipam.IpPool(tmp_path / "ipam.json", 7)
    addresses = [pool.allocate(f"uid-{i}") for i in range(600)]
    assert len(set(addresses)) == 600
    for address in addresses:
        octets = [int(x) for x in address.split(".")]
        assert octets[:2] == [127, 7] and octets[2] >= 1 and octets[3] not in (0, 1, 255)
    again = ipam.IpPool(tmp_path / "ipam.json", 7)
    assert again.lookup("uid-5") == addresses[5]
    again.release("uid-5")
    assert again.allocate("new") != addresses[5]


# --- wildcard binds become the pod IP --------------------------------------------------

POD = "127.9.1.7"


@pytest.mark.parametrize(
    "value, expected",
    [
        ("--listen-client-urls=http://0.0.0.0:2379", f"--listen-client-urls=http://{POD}:2379"),
        ("--listen-peer-urls=http://[::]:2380", f"--listen-peer-urls=http://{POD}:2380"),
        ("http://0.0.0.0:2379,http://127.0.0.1:2379", f"http://{POD}:2379,http://127.0.0.1:2379"),
        ("0.0.0.0:8080", f"{POD}:8080"),
        ("0.0.0.0", POD),
        ("[::]:8080", f"{POD}:8080"),
        ("::", POD),
        ("--bind=::", f"--bind={POD}"),
        (":8080", f"{POD}:8080"),
        ("--metrics-bind-address=:8443", f"--metrics-bind-address={POD}:8443"),
        ("http://:2379", f"http://{POD}:2379"),
        ("exec server --bind 0.0.0.0 --port 80", f"exec server --bind {POD} --port 80"),
        # not wildcard addresses: left as written
        ("0.0.0.0/0", "0.0.0.0/0"),
        ("10.0.0.0", "10.0.0.0"),
        ("100.0.0.0:1", "100.0.0.0:1"),
        ("0.0.0.01", "0.0.0.01"),
        ("--health-probe-bind-address=0", "--health-probe-bind-address=0"),
        ("http://etcd-0.etcd.ns.svc:2379", "http://etcd-0.etcd.ns.svc:2379"),
        ("fe80::1", "fe80::1"),
        ("a::b", "a::b"),
        ("12:30", "12:30"),
        ("--name=$(POD_NAME)", "--name=$(POD_NAME)"),
    ],
)
def test_wildcard_listen_addresses_become_the_pod_ip(value, expected):
    assert wildcard.bind_to_pod(value, POD) == expected


def test_environment_values_are_rewritten_not_names():
    env = {"ETCD_LISTEN_CLIENT_URLS": "http://0.0.0.0:2379", "HEALTH_ADDRESS": "0.0.0.0", "0.0.0.0": "x"}
    assert wildcard.env_bound_to_pod(env, POD) == {
        "ETCD_LISTEN_CLIENT_URLS": f"http://{POD}:2379",
        "HEALTH_ADDRESS": POD,
        "0.0.0.0": "x",
    }


def test_the_operator_image_binds_its_health_server_to_the_pod_ip_by_default():
    assert images.resolve("etcd-operator:dev", pathlib.Path("/nonexistent")).pod_ip_env == ("HEALTH_ADDRESS",)
