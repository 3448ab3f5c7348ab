"""Monitoring on the real nodes, on one shared 3-member cluster: the metric names the
shipped rules and dashboard use are really exposed by the operator and a member; a Prometheus
server from testbin scrapes both through file service discovery and shows the shipped
EtcdMembersDown alert firing while a member is stopped and resolved once it is back; the
operator's anomaly detection sees a database near its quota in a member's real metrics. The
operator is a process on the host; Prometheus scrapes it on loopback and the members by pod IP."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import subprocess
import urllib.parse
import urllib.request
import uuid

import pytest
import yaml

from etcd_operator.core.cluster import naming
from tests.support import monitoring
from tests.support.backups import apply_backup
from tests.support.chart_release import restricted_namespace
from tests.support.clusters import apply_cluster, condition, events, get_cluster, member_pods, wait_healthy
from tests.support.etcd_process import free_port
from tests.support.finalizers import release_finalizers
from tests.support.kubectl import kubectl
from tests.support.operator_process import OperatorProcess
from tests.support.processes import stop_gracefully
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.needs_nodes, pytest.mark.needs_operator_process, pytest.mark.needs_store]

CLUSTER = "mon"
QUOTA = 16 * 1024 * 1024  # the smallest the CRD allows


@pytest.fixture(scope="module")
def monitored(operator_process, kubectl_on_real_nodes, kube_api, real_nodes_use):
    """A namespace, an operator scraping member metrics every 3 s, and a healthy cluster, with
    the nodes kept from the other run's node faults for the whole module."""
    ns = f"h-monitoring-{uuid.uuid4().hex[:5]}"
    restricted_namespace(ns)
    operator = operator_process(ns, env={"MEMBER_METRICS_INTERVAL_SECONDS": "3"}).start()
    try:
        with real_nodes_use.nodes_kept():
            apply_cluster(ns, CLUSTER, {"size": 3, "storage": {"size": "1Gi"}, "etcd": {"quotaBackendBytes": QUOTA}})
            wait_healthy(ns, CLUSTER, 3)
            yield ns, operator
    finally:
        operator.stop()
        kubectl("delete", "namespace", ns, "--wait=false", check=False)
        release_finalizers(kube_api, ns)


def http_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read().decode()


def running_pods(ns: str) -> list[dict]:
    return [
        p
        for p in member_pods(ns, CLUSTER)
        if (p.get("status") or {}).get("podIP") and not p["metadata"].get("deletionTimestamp")
    ]


def test_monitoring_objects_pass_server_side_dry_run_against_the_prometheus_operator_crds(kubectl_on_real_nodes):
    for crd in monitoring.prometheus_operator_crds():
        kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
    kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        *(f"crd/{kind}.monitoring.coreos.com" for kind in monitoring.MONITORING_CRDS),
    )
    docs = [d for d in yaml.safe_load_all(kubectl("kustomize", str(monitoring.MONITORING)).stdout) if d]
    for doc in docs:
        doc["metadata"]["namespace"] = "default"
    result = kubectl("apply", "--dry-run=server", "-f", "-", check=False, input=yaml.safe_dump_all(docs))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("(server dry run)") == 4, result.stdout


def test_rules_and_dashboard_use_only_exposed_metric_names(monitored):
    ns, operator = monitored
    pod = running_pods(ns)[0]

    def exposed_now() -> set[str]:
        return (
            monitoring.exposed_names(http_text(f"http://127.0.0.1:{operator.health_port}/metrics"))
            | monitoring.exposed_names(http_text(f"http://{pod['status']['podIP']}:{naming.METRICS_PORT}/metrics"))
            | {"up"}
        )  # Prometheus's own series for every target

    used = monitoring.used_metric_names()
    # A member exports some families only once it has done what they measure (the peer round
    # trip histogram after its first probe of a peer; a new cluster is scraped within seconds).
    try:
        exposed = wait_for(lambda: (e := exposed_now()) >= used.keys() and e, 60, what="every used family exposed")
    except TimeoutError:
        exposed = exposed_now()
    missing = {name: sorted(where) for name, where in used.items() if name not in exposed}
    assert not missing, f"used but exposed by neither the operator nor a member: {missing}"
    assert len(used) > 20


class Prometheus:
    """A Prometheus server from testbin scraping the operator and the members (file_sd)."""

    def __init__(self, workdir, operator_port: int, ns: str):
        self.dir, self.port = workdir, free_port()
        (workdir / "rules.yaml").write_text(yaml.safe_dump(monitoring.rule_groups(for_override="2s")))
        (workdir / "operator.json").write_text(json.dumps([{"targets": [f"127.0.0.1:{operator_port}"]}]))
        (workdir / "members.json").write_text(
            json.dumps(
                [
                    {
                        "targets": [f"{p['status']['podIP']}:{naming.METRICS_PORT}"],
                        "labels": {"namespace": ns, "cluster": CLUSTER, "pod": p["metadata"]["name"]},
                    }
                    for p in running_pods(ns)
                ]
            )
        )
        (workdir / "prometheus.yml").write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
                    "rule_files": ["rules.yaml"],
                    "scrape_configs": [
                        {
                            "job_name": "etcd-operator-metrics",
                            "honor_labels": True,
                            "file_sd_configs": [{"files": ["operator.json"]}],
                        },
                        {"job_name": "etcd-members", "file_sd_configs": [{"files": ["members.json"]}]},
                    ],
                }
            )
        )
        self.log = open(workdir / "prometheus.log", "wb")
        self.process = subprocess.Popen(
            [
                str(monitoring.prometheus_binary("prometheus")),
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def api(self, path: str, **params) -> dict:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        body = json.loads(http_text(f"http://127.0.0.1:{self.port}/api/v1/{path}{query}"))
        assert body["status"] == "success", body
        return body["data"]

    def firing(self, alert: str, ns: str) -> list[dict]:
        return [
            a
            for a in self.api("alerts")["alerts"]
            if a["labels"].get("alertname") == alert and a["labels"].get("namespace") == ns and a["state"] == "firing"
        ]

    def stop(self) -> None:
        stop_gracefully(self.process, 20)
        self.log.close()


@pytest.fixture
def prometheus(monitored, tmp_path):
    ns, operator = monitored
    server = Prometheus(tmp_path, operator.health_port, ns)
    yield server
    server.stop()
    if server.process.returncode not in (0, -15):
        print((tmp_path / "prometheus.log").read_text()[-4000:])


def test_prometheus_sees_the_members_down_alert_fire_and_resolve(monitored, prometheus, container_faults):
    ns, _ = monitored
    # Both kinds of target are scraped: three members report a leader, the operator its view.
    wait_for(
        lambda: (
            prometheus.api("query", query=f'count(etcd_server_has_leader{{namespace="{ns}"}} == 1)')["result"][0][
                "value"
            ][1]
            == "3"
        ),
        60,
        what="Prometheus scraping three members",
    )
    wait_for(
        lambda: prometheus.api("query", query=f'etcd_operator_cluster_desired_members{{namespace="{ns}"}}')["result"],
        30,
        what="Prometheus scraping the operator",
    )
    assert prometheus.firing("EtcdMembersDown", ns) == []

    victim = running_pods(ns)[-1]["metadata"]["name"]
    container_faults.freeze_container(ns, victim, "etcd")  # the member stops answering, as a hung process would
    try:
        alert = wait_for(
            lambda: prometheus.firing("EtcdMembersDown", ns), 120, interval=1.0, what="EtcdMembersDown firing"
        )[0]
        assert alert["labels"]["cluster"] == CLUSTER and alert["labels"]["severity"] == "warning"
    finally:
        container_faults.thaw_container(ns, victim, "etcd")
    wait_healthy(ns, CLUSTER, 3)
    wait_for(lambda: prometheus.firing("EtcdMembersDown", ns) == [], 60, interval=1.0, what="EtcdMembersDown resolved")


def test_database_near_quota_is_detected_from_member_metrics(monitored):
    ns, _ = monitored
    endpoints = [f"{p['status']['podIP']}:{naming.CLIENT_PORT}" for p in running_pods(ns)]

    # 128 KiB values until every member's database is over 82 % of the quota, none full
    # (that would be NOSPACE). etcd reports the size as of its last backend commit (every
    # 100 ms, later under load), and the size grows in steps, not with every put. A Hash
    # call commits the backend first, so the size read after it is current, and the fill
    # stops on the put that crossed the line (CI once overshot to 17043456). Each member's
    # file grows on its own: one whose commits batched several puts fragmented its free
    # pages and stood at 100 % while the written member read 83 % (CI, once). So every
    # member commits after every put, and every member's size is read.
    async def fill() -> list[int]:
        import grpc
        from aetcd import rpc

        async with contextlib.AsyncExitStack() as stack:
            channels = [await stack.enter_async_context(grpc.aio.insecure_channel(e)) for e in endpoints]
            members = [rpc.MaintenanceStub(c) for c in channels]
            written = rpc.KVStub(channels[0])
            for i in range(200):
                for member in members:
                    await member.Hash(rpc.HashRequest(), timeout=30)
                sizes = [(await member.Status(rpc.StatusRequest(), timeout=30)).dbSize for member in members]
                if min(sizes) > 0.82 * QUOTA:
                    return sizes
                await written.Put(rpc.PutRequest(key=f"/fill/{i:03}".encode(), value=bytes(128 * 1024)), timeout=30)
        raise AssertionError(f"the databases never all passed 82 % of {QUOTA}")

    sizes = asyncio.run(fill())
    assert max(sizes) < QUOTA, f"a member filled up: {sizes}"

    def warned():
        obj = get_cluster(ns, CLUSTER)
        cond = condition(obj, "MemberWarnings")
        warned_members = [
            m["name"]
            for m in obj["status"]["members"]
            if any(w["kind"] == "DatabaseNearQuota" for w in m.get("warnings") or [])
        ]
        return (obj, cond) if cond and cond["status"] == "True" and len(warned_members) == 3 else None

    obj, cond = wait_for(warned, 90, interval=1.0, what="DatabaseNearQuota on all three members")
    assert cond["reason"] == "Warning" and "DatabaseNearQuota" in cond["message"]
    alarm = condition(obj, "Alarm") or {}
    assert alarm.get("status") == "False", f"near, not over the quota: {alarm} {obj['status']['members']}"
    wait_for(
        lambda: [e for e in events(ns, CLUSTER) if e["reason"] == "DatabaseNearQuota" and e["type"] == "Warning"],
        30,
        what="a DatabaseNearQuota event",
    )


def series_of(operator: OperatorProcess, name: str, **labels: str) -> list[float]:
    page = http_text(f"http://127.0.0.1:{operator.health_port}/metrics")
    from prometheus_client.parser import text_string_to_metric_families

    return [
        s.value
        for f in text_string_to_metric_families(page)
        for s in f.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]


def test_backup_freshness_comes_from_status_and_deleted_objects_lose_their_series(real_nodes, monitored):
    """Last in this module: it restarts the operator and deletes the cluster."""
    from tests.support.s3 import create_credentials_secret, s3_storage_spec

    ns, operator = monitored
    create_credentials_secret(real_nodes, ns)
    apply_backup(ns, "once", {"clusterRef": {"name": CLUSTER}, "storage": s3_storage_spec(real_nodes, f"tests/{ns}")})
    finished = wait_for(
        lambda: json.loads(kubectl("get", "etcdbackup", "once", "-n", ns, "-o", "json").stdout)["status"].get(
            "lastSuccessfulTime"
        ),
        120,
        what="backup completed",
    )
    expected = datetime.datetime.fromisoformat(finished.replace("Z", "+00:00")).timestamp()

    # A new process (as after a failover) knows nothing but what it reads from status.
    operator.stop()
    operator.start()
    metric = "etcd_operator_backup_last_success_timestamp_seconds"
    assert wait_for(
        lambda: series_of(operator, metric, namespace=ns, backup="once"),
        60,
        what="backup freshness exported by the new process",
    ) == [expected]
    # The cluster's series come back with the new process's first pass over it.
    desired = "etcd_operator_cluster_desired_members"
    wait_for(
        lambda: series_of(operator, desired, namespace=ns, cluster=CLUSTER),
        60,
        what="the cluster's series exported by the new process",
    )

    kubectl("delete", "etcdbackup", "once", "-n", ns)
    wait_for(lambda: not series_of(operator, metric, namespace=ns), 60, what="the deleted backup's series gone")
    assert series_of(operator, desired, namespace=ns, cluster=CLUSTER) == [3], "the backup took the cluster's series"
    kubectl("delete", "etcdcluster", CLUSTER, "-n", ns)
    wait_for(
        lambda: (
            not series_of(operator, desired, namespace=ns)
            and not series_of(operator, "etcd_operator_cluster_members", namespace=ns)
        ),
        60,
        what="the deleted cluster's series gone",
    )
