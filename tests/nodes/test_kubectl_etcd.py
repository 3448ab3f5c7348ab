"""`kubectl etcd` (the plugin pip installs beside the operator) against a 3-member TLS cluster
on the real nodes, run by the chart's release as users run it: status, a snapshot and the
backups it lists from the EtcdBackup's status, a restore that asks first, a defragmentation
request, a leader move under etcdctl clients, an approval of quorum recovery that asks first,
and etcdctl through a port-forward as the cluster's client certificate, then (with spec.auth
turned on last) as a user's. One cluster serves the module, in file order."""

from __future__ import annotations

import base64
import json
import os
import pathlib
import re
import subprocess
import sys
import threading

import pytest
import yaml

from etcd_operator_kubectl.views import human_bytes
from tests.support import chart_release, doc_commands, service_accounts
from tests.support.clusters import GROUP, apply_cluster, events, get_cluster, wait_condition, wait_healthy
from tests.support.diagnostics import fresh_namespace_name
from tests.support.kubectl import kubectl, kubectl_json
from tests.support.kubectl_etcd import member_table, plugin, plugin_json, tools_path
from tests.support.s3 import create_credentials_secret, s3_storage_spec
from tests.support.waiting import wait_for

pytestmark = [
    pytest.mark.needs_nodes,
    pytest.mark.needs_release,
    pytest.mark.needs_store,
    pytest.mark.usefixtures("kubectl_on_real_nodes", "operator_release"),
]


@pytest.fixture(scope="module")
def cluster_namespace(real_nodes, operator_release, kubectl_on_real_nodes):
    """A restricted namespace with a 3-member TLS cluster `app` (as the CRD defaults it; the
    tests' apply_cluster defaults to plaintext) and S3 credentials; deleted afterwards, its
    data with it."""
    name = fresh_namespace_name("n", "kubectl-etcd")
    chart_release.restricted_namespace(name)
    apply_cluster(
        name, "app", {"size": 3, "storage": {"size": "1Gi"}, "reclaimPolicy": "Delete", "tls": {"enabled": True}}
    )
    create_credentials_secret(real_nodes, name)
    wait_healthy(name, "app", 3)
    yield name
    kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_kubectl_etcd_status_shows_every_member_and_the_conditions(cluster_namespace):
    table = plugin("status", "app", "-n", cluster_namespace)
    assert table.returncode == 0, table.stderr
    view = plugin_json("status", "app", "-n", cluster_namespace)
    names = [m["name"] for m in view["members"]]
    assert len(names) == 3 and all(n in table.stdout for n in names)
    assert {m["role"] for m in view["members"]} == {"leader", "follower"}
    assert all(m["healthy"] and m["revisionLag"] >= 0 and m["dbSize"] > 0 for m in view["members"])
    # The quota and the alarms are the operator's, as it wrote them in the object's status.
    recorded = get_cluster(cluster_namespace, "app")["status"]
    quota = recorded["quota"]["backendBytes"]  # no spec.etcd.quotaBackendBytes: derived from the volume
    assert isinstance(quota, int) and quota > 0, recorded["quota"]
    assert view["quotaBytes"] == quota and [m["quotaBytes"] for m in view["members"]] == [quota] * 3, (quota, view)
    assert f"quota {human_bytes(quota)}" in table.stdout
    assert recorded["alarms"] == [] and view["alarms"] == [], (recorded["alarms"], view["alarms"])
    rows = member_table(table.stdout)
    assert sorted(rows) == sorted(names) and {r["ALARMS"] for r in rows.values()} == {"-"}, rows
    assert all(f" / {human_bytes(quota)}" in r["DB SIZE / QUOTA"] for r in rows.values()), rows
    assert all(m["alarms"] == [] for m in view["members"]) and "ALARMS RAISED" not in table.stdout
    assert {"Available"} <= {c["type"] for c in view["conditions"]} and "Available" in table.stdout
    missing = plugin("status", "nope", "-n", cluster_namespace)
    assert missing.returncode == 1 and "Traceback" not in missing.stderr, missing.stderr
    assert missing.stderr.startswith('error: etcdclusters.etcd.operator.dev "nope" not found'), missing.stderr


def test_kubectl_etcd_snapshot_then_backups_lists_it_from_the_status(real_nodes, cluster_namespace):
    kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": GROUP,
                "kind": "EtcdBackup",
                "metadata": {"name": "first", "namespace": cluster_namespace},
                "spec": {
                    "clusterRef": {"name": "app"},
                    "storage": s3_storage_spec(real_nodes, f"plugin/{cluster_namespace}"),
                },
            }
        ),
    )
    created = plugin_json("snapshot", "app", "--storage-from", "first", "--name", "now", "-n", cluster_namespace)
    assert created["spec"]["clusterRef"] == {"name": "app"} and "schedule" not in created["spec"]
    done = wait_for(
        lambda: (
            (b := kubectl_json("get", "etcdbackup", "now", "-n", cluster_namespace))["status"].get("phase")
            in ("Completed", "Failed")
            and b
        ),
        180,
        what="the snapshot taken",
    )
    assert done["status"]["phase"] == "Completed", done["status"]
    entries = plugin_json("backups", "now", "-n", cluster_namespace)["snapshots"]
    assert [e["key"] for e in entries] == [done["status"]["lastBackup"]["key"]]
    assert entries[0]["revision"] == done["status"]["lastBackup"]["revision"]
    assert entries[0]["size"] == done["status"]["lastBackup"]["size"] and entries[0]["verification"]
    table = plugin("backups", "now", "-n", cluster_namespace)
    assert str(entries[0]["revision"]) in table.stdout


def test_kubectl_etcd_restore_asks_first_then_creates_the_restore(cluster_namespace):
    refused = plugin("restore", "now", "--new-cluster", "copy", "--size", "1", "-n", cluster_namespace, input="")
    assert refused.returncode == 1 and "into a NEW cluster copy" in refused.stderr
    assert not kubectl_json("get", "etcdrestore", "-n", cluster_namespace)["items"]

    restore = plugin_json(
        "restore", "now", "--new-cluster", "copy", "--size", "1", "--name", "to-copy", "--yes", "-n", cluster_namespace
    )
    key = kubectl_json("get", "etcdbackup", "now", "-n", cluster_namespace)["status"]["lastBackup"]["key"]
    assert restore["spec"]["source"]["backupRef"] == {"name": "now", "key": key}
    done = wait_for(
        lambda: (
            (r := kubectl_json("get", "etcdrestore", "to-copy", "-n", cluster_namespace))["status"].get("phase")
            in ("Completed", "Failed")
            and r
        ),
        300,
        what="restore finished",
    )
    assert done["status"]["phase"] == "Completed", done["status"]
    wait_healthy(cluster_namespace, "copy", 1)


def test_kubectl_etcd_defrag_sets_a_new_token(cluster_namespace):
    annotation = "etcd.operator.dev/defragment"
    kubectl("annotate", "etcdcluster", "app", "-n", cluster_namespace, f"{annotation}=an-earlier-request")
    token = plugin_json("defrag", "app", "-n", cluster_namespace)[annotation]
    assert token not in ("an-earlier-request", "")
    assert get_cluster(cluster_namespace, "app")["metadata"]["annotations"][annotation] == token


def leader_of(namespace: str) -> str:
    return get_cluster(namespace, "app")["status"]["leader"]


def test_kubectl_etcd_move_leader_hands_over_while_clients_keep_their_lease_lock_and_watch(cluster_namespace, tmp_path):
    """The page's command, with a watch, a lease kept alive, a lock held and a transaction of
    etcdctl clients (each a `kubectl etcd etcdctl` session) open across it: none of them
    notices more than a new leader."""
    namespace = cluster_namespace
    wait_healthy(namespace, "app", 3)
    env = as_users_run_it(tmp_path, namespace)
    session = ["kubectl", "etcd", "etcdctl", "app", "--"]

    def etcd(*args: str, stdin: str | None = None) -> str:
        done = typed(env, [*session, *args], stdin)
        assert done.returncode == 0, (args, done.stderr)
        return done.stdout

    def client(*args: str) -> tuple[subprocess.Popen, list[str]]:
        """A long-running session, and the lines it printed so far (read by a thread of its own)."""
        process = subprocess.Popen(
            [*session, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        lines: list[str] = []
        threading.Thread(target=lambda: lines.extend(line.rstrip("\n") for line in process.stdout), daemon=True).start()
        return process, lines

    first = json.loads(etcd("put", "/moving/before", "1", "-w", "json"))["header"]["revision"]
    watch, watched = client("watch", "--prefix", "/moving/", f"--rev={first}")
    lease = etcd("lease", "grant", "30").split()[1]  # "lease <hex id> granted with TTL(30s)"
    keepalive, _ = client("lease", "keep-alive", lease)
    etcd("put", "--lease", lease, "/moving/leased", "held")
    lock, locked = client("lock", "moving-lock")
    clients = [watch, keepalive, lock]
    try:
        held = wait_for(
            lambda: next((line for line in locked if line.startswith("moving-lock/")), None), 60, what="the lock"
        )
        before = leader_of(namespace)
        to = sorted(m["name"] for m in get_cluster(namespace, "app")["status"]["members"] if m["name"] != before)[0]

        _, argv = doc_commands.command(
            "docs/operations/kubectl-plugin.md", "kubectl etcd move-leader", CLUSTER="app", MEMBER=to
        )
        moved = plugin(*argv[2:], "-n", namespace)
        assert moved.returncode == 0, moved.stdout + moved.stderr
        assert f"etcdcluster.etcd.operator.dev/app: moved from {before} to {to}" in moved.stdout, moved.stdout
        wait_for(lambda: leader_of(namespace) == to, 60, what=f"status naming {to} the leader")
        assert plugin_json("status", "app", "-n", namespace)["leader"] == to
        assert any(e["reason"] == "LeaderMoved" and to in e["message"] for e in events(namespace, "app"))

        # The clients, after the move: the lock is still the one it was, held by the same session;
        # the lease lives, kept alive; a transaction commits; the watch saw every put, in order.
        locks = json.loads(etcd("get", "--prefix", "moving-lock/", "-w", "json")).get("kvs") or []
        assert [base64.b64decode(kv["key"]).decode() for kv in locks] == [held], locks
        assert all(c.poll() is None for c in clients), [c.args for c in clients if c.poll() is not None]
        alive = etcd("lease", "timetolive", lease)
        assert "remaining(" in alive and "remaining(-1s)" not in alive, alive
        txn = etcd("txn", stdin='value("/moving/leased") = "held"\n\nput /moving/after 2\n\nput /moving/after 0\n\n')
        assert txn.startswith("SUCCESS"), txn
        # etcdctl watch prints each event as three lines: its type, the key, the value.
        wait_for(lambda: "/moving/after" in watched, 30, what="the watch seeing the put after the move")
        seen = [(watched[n], watched[n + 1]) for n, line in enumerate(watched) if line in ("PUT", "DELETE")]
        assert seen == [("PUT", "/moving/before"), ("PUT", "/moving/leased"), ("PUT", "/moving/after")], watched

        refused = plugin("move-leader", "app", "--to", "nope", "--wait", "-n", namespace)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert "refused: nope is not a voting member of the cluster" in refused.stdout, refused.stdout
        assert leader_of(namespace) == to
        assert any(e["reason"] == "LeaderMoveRefused" and "nope" in e["message"] for e in events(namespace, "app"))
    finally:
        for c in clients:
            c.terminate()  # the plugin stops its port-forward and removes its files on SIGTERM
        for c in clients:
            c.wait(timeout=30)


def test_kubectl_etcd_approve_recovery_asks_first_then_annotates(cluster_namespace):
    annotation = "etcd.operator.dev/approve-quorum-recovery"
    refused = plugin("approve-recovery", "app", "-n", cluster_namespace, input="")
    assert refused.returncode == 1 and "force-new-cluster" in refused.stderr
    assert annotation not in (get_cluster(cluster_namespace, "app")["metadata"].get("annotations") or {})
    assert plugin_json("approve-recovery", "app", "--yes", "-n", cluster_namespace)[annotation] == "true"
    kubectl("annotate", "etcdcluster", "app", "-n", cluster_namespace, f"{annotation}-")


def as_users_run_it(tmp_path: pathlib.Path, namespace: str) -> dict[str, str]:
    """The environment of `kubectl etcd ...` typed in a shell: kubectl finds the plugin on PATH,
    etcdctl is on PATH too, and the kubeconfig's context names the cluster's namespace. TMPDIR
    is the test's own, so that what the plugin leaves there can be seen."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(pathlib.Path(os.environ["KUBECONFIG"]).read_text())
    kubectl("config", "set-context", "--current", f"--namespace={namespace}", "--kubeconfig", str(kubeconfig))
    (tmp_path / "tmp").mkdir()
    path = os.pathsep.join([os.path.dirname(sys.executable), tools_path()])
    return {**os.environ, "KUBECONFIG": str(kubeconfig), "PATH": path, "TMPDIR": str(tmp_path / "tmp")}


def typed(env: dict[str, str], argv: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
    """`argv` as typed in a shell with `env` (as_users_run_it): its exit code and output."""
    return subprocess.run(argv, env=env, input=stdin, capture_output=True, text=True, timeout=120)


def port_forwards(namespace: str) -> list[str]:
    """The command lines of the kubectl port-forwards into `namespace` still running."""
    found = []
    for proc in pathlib.Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone, or not a process
        words = [w.decode(errors="replace") for w in argv]
        if "port-forward" in words and namespace in words:
            found.append(" ".join(words))
    return found


def test_kubectl_etcd_etcdctl_writes_and_reads_as_the_clusters_client_certificate(cluster_namespace, tmp_path):
    """The page's two commands, as printed, through kubectl's plugin lookup: the value written
    is read back; nothing of the identity is printed nor left behind, no port-forward stays."""
    env = as_users_run_it(tmp_path, cluster_namespace)
    _, put = doc_commands.command(
        "docs/operations/kubectl-plugin.md", "kubectl etcd etcdctl CLUSTER -- put", CLUSTER="app"
    )
    _, get = doc_commands.command(
        "docs/operations/kubectl-plugin.md", "kubectl etcd etcdctl CLUSTER -- get", CLUSTER="app"
    )
    written = typed(env, put)
    assert (written.returncode, written.stdout) == (0, "OK\n"), written.stderr
    read = typed(env, get)
    assert (read.returncode, read.stdout) == (0, "/greeting\nhello\n"), read.stderr
    for output in (written.stdout, written.stderr, read.stdout, read.stderr):
        assert "-----BEGIN" not in output
    assert list((tmp_path / "tmp").iterdir()) == [] and port_forwards(cluster_namespace) == []
    # etcd answers to the client Secret's identity: its CN is etcd-client (auth is off, so
    # the name is all there is to see); the member count proves the session reached etcd.
    members = typed(env, ["kubectl", "etcd", "etcdctl", "app", "--", "member", "list", "-w", "json"])
    assert members.returncode == 0, members.stderr
    assert len(json.loads(members.stdout)["members"]) == 3
    refused = typed(env, ["kubectl", "etcd", "etcdctl", "app", "--user", "etcd-operator", "--", "get", "/greeting"])
    assert refused.returncode == 1 and refused.stdout == "", refused
    assert refused.stderr == (
        "error: --user etcd-operator is the operator's own identity: kubectl etcd runs only as client identities\n"
    )


def documented_etcdctl_role(namespace: str) -> dict:
    """The plugin page's Role for kubectl etcd etcdctl, for the cluster `app` in `namespace`."""
    page = (doc_commands.ROOT / "docs/operations/kubectl-plugin.md").read_text()
    found = re.findall(r"^```yaml\n(apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\n.*?)^```", page, re.S | re.M)
    assert len(found) == 1, "the plugin page shows one Role"
    role = yaml.safe_load(found[0].replace("demo", "app"))
    role["metadata"]["namespace"] = namespace
    return role


def test_kubectl_etcd_etcdctl_runs_with_the_documented_role_and_it_opens_no_other_secret(
    real_nodes, cluster_namespace, tmp_path
):
    """A ServiceAccount with only the page's Role runs the session; the operator's Secret stays closed to it."""
    role = documented_etcdctl_role(cluster_namespace)
    account = "etcdctl-user"
    objects = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": cluster_namespace}},
        role,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": account, "namespace": cluster_namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": cluster_namespace}],
        },
    ]
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    env = as_users_run_it(tmp_path, cluster_namespace)
    kubeconfig = service_accounts.token_kubeconfig(
        real_nodes, cluster_namespace, account, tmp_path / "sa.kubeconfig", context_namespace=cluster_namespace
    )
    env["KUBECONFIG"] = str(kubeconfig)
    read = typed(env, ["kubectl", "etcd", "etcdctl", "app", "--", "get", "/greeting", "--print-value-only"])
    assert (read.returncode, read.stdout) == (0, "hello\n"), read.stderr
    closed = subprocess.run(
        ["kubectl", "get", "secret", "app-operator-tls", "-o", "name"], env=env, capture_output=True, text=True
    )
    assert closed.returncode == 1 and "forbidden" in closed.stderr, closed


def test_kubectl_etcd_etcdctl_as_a_spec_auth_user_reads_its_prefix_only(cluster_namespace, tmp_path):
    """Last in the module: auth turned on for `app`, with a user whose certificate the operator
    issues; through its Secret the session may use /tenant-a/ and etcd refuses the rest."""
    patched = kubectl(
        "patch",
        "etcdcluster",
        "app",
        "-n",
        cluster_namespace,
        "--type=merge",
        "-p",
        json.dumps(
            {
                "spec": {
                    "auth": {
                        "enabled": True,
                        "roles": [
                            {
                                "name": "tenant-a",
                                "permissions": [{"key": "/tenant-a/", "prefix": True, "access": "ReadWrite"}],
                            }
                        ],
                        "users": [{"name": "tenant-a", "roles": ["tenant-a"], "certificate": True}],
                    }
                }
            }
        ),
        check=False,
    )
    assert patched.returncode == 0, patched.stderr
    wait_condition(cluster_namespace, "app", "AuthEnabled", "True", timeout=360)
    env = as_users_run_it(tmp_path, cluster_namespace)

    def as_tenant(*args: str) -> subprocess.CompletedProcess:
        argv = ["kubectl", "etcd", "etcdctl", "app", "--user", "tenant-a", "--", *args]
        return typed(env, argv)

    written = as_tenant("put", "/tenant-a/k", "v")
    assert (written.returncode, written.stdout) == (0, "OK\n"), written.stderr
    read = as_tenant("get", "/tenant-a/k")
    assert (read.returncode, read.stdout) == (0, "/tenant-a/k\nv\n"), read.stderr
    outside = as_tenant("get", "/greeting")
    assert outside.returncode != 0 and "permission denied" in outside.stderr, outside
    assert list((tmp_path / "tmp").iterdir()) == [] and port_forwards(cluster_namespace) == []
