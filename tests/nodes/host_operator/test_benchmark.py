"""`kubectl etcd benchmark` against a TLS cluster on the real nodes: the docs' command runs
etcd's own performance check as a Job in the cluster's namespace, as the cluster's client
identity, under restricted Pod Security; it reports etcdctl's verdicts, its exit follows
etcdctl's, and the check leaves no key behind. A user the cluster does not declare is refused
before anything is created."""

from __future__ import annotations

import pytest

from etcd_operator_kubectl import benchmark
from tests.support import doc_commands
from tests.support.clusters import apply_cluster, wait_healthy
from tests.support.kubectl import kubectl_json
from tests.support.kubectl_etcd import plugin

pytestmark = [pytest.mark.needs_nodes, pytest.mark.needs_operator_process]


def test_the_benchmark_job_reports_etcds_verdicts_and_leaves_no_key(namespace, operator, tmp_path):
    apply_cluster(namespace, "bench", {"size": 1, "storage": {"size": "1Gi"}, "tls": {"enabled": True}})
    wait_healthy(namespace, "bench", 1)

    refused = plugin("benchmark", "bench", "--user", "x-operator-tls", "-n", namespace)
    assert refused.returncode == 1 and "is not a spec.auth user of EtcdCluster bench" in refused.stderr, refused
    assert kubectl_json("get", "jobs", "-n", namespace)["items"] == []

    _, argv = doc_commands.command("docs/operations/kubectl-plugin.md", "kubectl etcd benchmark", CLUSTER="bench")
    ran = plugin(*argv[2:], "-n", namespace, timeout=400)  # the check itself runs a minute
    (job,) = kubectl_json("get", "jobs", "-n", namespace)["items"]
    passed = benchmark.finished(job)
    assert passed is not None, job["status"]
    assert ran.returncode == (0 if passed else 1), ran.stdout + ran.stderr
    report = benchmark.verdicts(ran.stdout)
    # etcdctl's three checks, each passed or failed, then its overall verdict, which is the Job's
    checks = {check: [line for line in report if check in line] for check in ("Throughput", "Slowest", "Stddev")}
    assert [len(lines) for lines in checks.values()] == [1, 1, 1], ran.stdout + ran.stderr
    assert report[-1] == ("PASS" if passed else "FAIL"), ran.stdout + ran.stderr

    (pod,) = kubectl_json("get", "pods", "-n", namespace, "-l", f"job-name={job['metadata']['name']}")["items"]
    assert (
        pod["spec"]["securityContext"]["runAsNonRoot"] is True and pod["spec"]["automountServiceAccountToken"] is False
    )
    (volume,) = pod["spec"]["volumes"]
    assert volume["secret"]["secretName"] == "bench-client-tls"
    # The check deleted its keys: counted as the client identity, through a port-forward.
    left = plugin(
        "etcdctl", "bench", "-n", namespace, "--", "get", "--prefix", benchmark.PREFIX, "--count-only", "-w", "fields"
    )
    assert left.returncode == 0 and '"Count" : 0' in left.stdout, left.stdout + left.stderr
