"""`kubectl etcd benchmark` (etcd_operator_kubectl/benchmark.py and its command): the Job it
creates, who it runs as, and how etcdctl's report is read back."""

from __future__ import annotations

import asyncio

import pytest

from etcd_operator.core.cluster import naming
from etcd_operator.core.cluster.spec import ClusterSpec
from etcd_operator_kubectl import benchmark, cli

# The end of a real run's log (tests/nodes/host_operator/test_benchmark.py, etcdctl 3.6.16):
# its progress bar redraws without a newline, and the first verdict follows its last frame.
REAL_LOG = (
    "58 / 60 [-------------------------------------------------------------------------->__] 96.67% 1 p/s"
    "59 / 60 [--------------------------------------------------------------------------->_] 98.33% 1 p/s"
    "59 / 60 [----------------------------------------->_________________________________"
    "PASS: Throughput is 151 writes/s\n"
    "PASS: Slowest request took 0.033682s\n"
    "PASS: Stddev is 0.000653s\n"
    "PASS\n"
)
# A run whose slowest request took too long: the throughput and spread lines and the verdict of a
# CI run's check; its slowest-request line (which an earlier parser dropped, so its figure was not
# seen) in the words of etcdctl/ctlv3/command/check.go, where that failure has no FAIL prefix.
FAILED_LOG = (
    "59 / 60 [--------------------------------------------------------------------------->_] 98.33% 1 p/s"
    "PASS: Throughput is 144 writes/s\n"
    "Slowest request took too long: 0.612000s\n"
    "PASS: Stddev is 0.034510s\n"
    "FAIL\n"
)
# Every check failed, and requests with them (each line as check.go prints it).
ERRORS_LOG = (
    "FAIL: too many errors\n"
    "FAIL: ERROR(context deadline exceeded) -> 3\n"
    "FAIL: Throughput too low: 89 writes/s\n"
    "Slowest request took too long: 1.210000s\n"
    "Stddev too high: 0.121003s\n"
    "FAIL\n"
)


def cluster_object(spec: dict, transport: str | None = None) -> dict:
    status = {"tls": {"transport": transport}} if transport else {}
    return {"metadata": {"name": "demo", "namespace": "apps"}, "spec": spec, "status": status}


def job_for(spec: dict, tls: bool, secret: str | None, load: str = "s") -> dict:
    return benchmark.benchmark_job("demo-benchmark-1", "apps", "demo", ClusterSpec.from_dict(spec), tls, secret, load)


def test_the_job_runs_etcds_check_as_the_client_identity_restricted_and_tokenless():
    spec = ClusterSpec.from_dict({"size": 3})
    job = job_for({"size": 3}, True, "demo-client-tls", "m")
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == spec.image
    assert container["command"][:2] == ["etcdctl", "--endpoints=https://demo-client.apps.svc:2379"]
    assert "check" in container["command"] and "--load=m" in container["command"]
    assert f"--prefix={benchmark.PREFIX}" in container["command"]
    assert not {"--auto-compact", "--auto-defrag"} & set(container["command"])
    (volume,) = pod["volumes"]
    assert volume["secret"]["secretName"] == "demo-client-tls"
    assert {item["path"] for item in volume["secret"]["items"]} == {"ca.crt", "tls.crt", "tls.key"}
    assert pod["automountServiceAccountToken"] is False and pod["restartPolicy"] == "Never"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["activeDeadlineSeconds"] > 0
    # Not a member to the operator: none of the labels it selects its members by.
    assert naming.LABEL_CLUSTER not in job["spec"]["template"]["metadata"]["labels"]


def test_a_plaintext_cluster_gets_no_secret_and_no_tls_flags():
    job = job_for({"size": 1, "tls": {"enabled": False}}, False, None)
    pod = job["spec"]["template"]["spec"]
    assert "volumes" not in pod
    command = pod["containers"][0]["command"]
    assert command[1] == "--endpoints=http://demo-client.apps.svc:2379"
    assert not [word for word in command if word.startswith(("--cacert", "--cert", "--key"))]


def test_a_tls_cluster_without_an_identity_and_an_unknown_load_are_refused():
    with pytest.raises(benchmark.Refused, match="needs a client identity"):
        job_for({"size": 1}, True, None)
    with pytest.raises(benchmark.Refused, match="--load xxl"):
        job_for({"size": 1}, True, "demo-client-tls", "xxl")


def test_a_user_must_be_declared_with_a_certificate():
    declared = ClusterSpec.from_dict(
        {
            "auth": {
                "enabled": True,
                "roles": [{"name": "r", "permissions": [{"key": "/a/", "prefix": True, "access": "ReadWrite"}]}],
                "users": [
                    {"name": "tenant-a", "roles": ["r"], "certificate": True},
                    {"name": "reporting", "roles": ["r"]},
                ],
            }
        }
    )
    benchmark.declared_certificate_user(declared, "demo", "tenant-a")
    for user in ("reporting", "x-operator-tls"):
        with pytest.raises(benchmark.Refused, match=f"--user {user} is not a spec.auth user of EtcdCluster demo"):
            benchmark.declared_certificate_user(declared, "demo", user)


def test_the_job_name_is_a_dns_label():
    assert benchmark.job_name("demo", "20261205131407") == "demo-benchmark-20261205131407"
    assert len(benchmark.job_name("c" * 80, "20261205131407")) == 63


def test_etcdctls_report_is_read_past_its_progress_bar_failures_included():
    assert benchmark.verdicts(REAL_LOG) == [
        "PASS: Throughput is 151 writes/s",
        "PASS: Slowest request took 0.033682s",
        "PASS: Stddev is 0.000653s",
        "PASS",
    ]
    assert benchmark.verdicts(FAILED_LOG) == [
        "PASS: Throughput is 144 writes/s",
        "Slowest request took too long: 0.612000s",
        "PASS: Stddev is 0.034510s",
        "FAIL",
    ]
    assert benchmark.verdicts(ERRORS_LOG) == ERRORS_LOG.splitlines()


@pytest.mark.parametrize(
    "conditions, verdict",
    [
        ([], None),
        ([{"type": "Complete", "status": "True"}], True),
        ([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}], False),
        ([{"type": "SuccessCriteriaMet", "status": "True"}], None),  # Complete follows it
    ],
)
def test_the_jobs_conditions_give_the_verdict(conditions, verdict):
    assert benchmark.finished({"status": {"conditions": conditions}}) is verdict


class JobKube:
    """The API as the command uses it: the cluster, the Job it creates, finished at once, and its pod's log."""

    def __init__(self, cluster: dict, conditions: list[dict], log: str):
        self.cluster, self.conditions, self.log, self.jobs = cluster, conditions, log, []

    async def get(self, namespace, plural, name):
        return self.cluster

    async def create_job(self, namespace, body):
        self.jobs.append(body)
        return body

    async def job(self, namespace, name):
        return {**self.jobs[-1], "status": {"conditions": self.conditions}}

    async def pod_logs(self, namespace, selector, tail):
        assert selector == f"job-name={self.jobs[-1]['metadata']['name']}"
        return {"pod": self.log}


@pytest.mark.parametrize(
    "conditions, log, code",
    [([{"type": "Complete", "status": "True"}], REAL_LOG, 0), ([{"type": "Failed", "status": "True"}], FAILED_LOG, 1)],
)
def test_the_command_waits_prints_the_verdicts_and_exits_as_etcdctl_did(capsys, conditions, log, code):
    kube = JobKube(cluster_object({"size": 3}, "https"), conditions, log)
    args = cli.parser().parse_args(["benchmark", "demo", "--wait"])
    assert asyncio.run(cli.cmd_benchmark(args, kube, "apps")) == code
    printed = capsys.readouterr().out
    assert printed.splitlines() == benchmark.verdicts(log) and "p/s" not in printed
    (job,) = kube.jobs
    assert job["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"] == "demo-client-tls"


@pytest.mark.parametrize(
    "argv, transport, complaint",
    [
        (["--user", "etcd-operator"], "https", "the operator's own identity"),
        (["--user", "x-operator-tls"], "https", "is not a spec.auth user of EtcdCluster demo"),
        (["--user", "tenant-a"], "http", "serves plaintext"),
    ],
)
def test_a_refused_identity_creates_nothing(capsys, argv, transport, complaint):
    kube = JobKube(cluster_object({"size": 3}, transport), [], "")
    args = cli.parser().parse_args(["benchmark", "demo", *argv])
    assert asyncio.run(cli.cmd_benchmark(args, kube, "apps")) == 1
    assert complaint in capsys.readouterr().err and kube.jobs == []
