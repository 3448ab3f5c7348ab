"""`kubectl etcd benchmark`: etcd's own performance check (`etcdctl check perf`) run inside the
cluster's namespace as a Job, against the cluster's client Service, so that what it measures is
the cluster and its network, not a laptop's port-forward. Pure: the Job is built here, cli.py
creates it and follows it.

The Job runs the members' own image (etcdctl ships with etcd) with the restricted security
context and no service account token, as a client identity: the cluster's client Secret, or a
spec.auth user's that the EtcdCluster declares with a certificate. The plugin never reads that
Secret; the Job mounts it. The check writes under its own prefix and deletes its keys when it
ends; it neither compacts nor defragments (etcdctl's --auto-compact and --auto-defrag stay off:
both are the operator's to decide)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from etcd_operator.core import pod_security
from etcd_operator.core.cluster import builders, naming
from etcd_operator.core.cluster.certs import CA_KEY, CERT_KEY, PRIVATE_KEY_KEY
from etcd_operator.core.cluster.spec import ClusterSpec

LOADS = ("s", "m", "l", "xl")  # etcdctl's workload models: small, medium, large, extra large
PREFIX = "/kubectl-etcd-benchmark/"
TLS_DIR = "/etc/etcd-benchmark/tls"
DEADLINE_SECONDS = 600  # the check runs about a minute; a Job that cannot start ends
KEEP_SECONDS = 3600  # a finished Job and its log stay an hour for `kubectl logs`
MANAGED_BY = "kubectl-etcd"
LABEL_BENCHMARK_OF = f"{naming.API_GROUP}/benchmark-of"
# etcdctl's report (etcdctl/ctlv3/command/check.go): a line per check, "PASS: Throughput is
# 150 writes/s" or "FAIL: Throughput too low: ...", "PASS: Slowest request took ..." or
# "Slowest request took too long: ...", "PASS: Stddev is ..." or "Stddev too high: ..." (those
# two failures carry no FAIL prefix), "FAIL: too many errors" and "FAIL: ERROR(...) -> n" when
# requests failed, then the verdict alone, "PASS" or "FAIL". Its progress bar redraws without a
# newline, so the first of these follows the bar's last frame on the same line.
REPORT = re.compile(r"((?:PASS|FAIL)(?:: .*)?|Slowest request took too long: .*|Stddev too high: .*)$")


class Refused(Exception):
    """The Job is not created; the message says why."""


def declared_certificate_user(spec: ClusterSpec, cluster: str, user: str) -> None:
    """A --user must be a spec.auth user of this cluster with a certificate the operator issues:
    a name alone could name another object's Secret (`a` with user `x-operator-tls` would be
    `a-user-x-operator-tls`, the operator Secret of a cluster `a-user-x`)."""
    declared = [u.name for u in spec.auth.users if u.certificate] if spec.auth.declared else []
    if user not in declared:
        raise Refused(
            f"--user {user} is not a spec.auth user of EtcdCluster {cluster} with `certificate: true`; "
            f"users with a certificate: {', '.join(declared) or 'none'}"
        )


def job_name(cluster: str, stamp: str) -> str:
    """`<cluster>-benchmark-<stamp>`, cut to a DNS label's 63 characters from the cluster's end."""
    suffix = f"-benchmark-{stamp}"
    return f"{cluster[: 63 - len(suffix)]}{suffix}"


def benchmark_job(
    name: str, namespace: str, cluster: str, spec: ClusterSpec, tls: bool, secret: str | None, load: str
) -> dict[str, Any]:
    """The Job: `etcdctl check perf` against the client Service, as the identity in `secret`
    (required with `tls`, unused without)."""
    if load not in LOADS:
        raise Refused(f"--load {load}: one of {', '.join(LOADS)}")
    scheme = "https" if tls else "http"
    endpoint = f"{scheme}://{naming.client_service_host(cluster, namespace)}:{naming.CLIENT_PORT}"
    command = ["etcdctl", f"--endpoints={endpoint}", "--dial-timeout=10s", "check", "perf", f"--load={load}"]
    command += [f"--prefix={PREFIX}"]
    container: dict[str, Any] = {
        "name": "check-perf",
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [container],
    }
    if tls:
        if not secret:
            raise Refused(f"EtcdCluster {cluster} serves TLS: the benchmark needs a client identity")
        command += [
            f"--cacert={TLS_DIR}/{CA_KEY}",
            f"--cert={TLS_DIR}/{CERT_KEY}",
            f"--key={TLS_DIR}/{PRIVATE_KEY_KEY}",
        ]
        container["volumeMounts"] = [{"name": "client-tls", "mountPath": TLS_DIR, "readOnly": True}]
        pod_spec["volumes"] = [
            {
                "name": "client-tls",
                "secret": {
                    "secretName": secret,
                    "defaultMode": 0o440,
                    "items": [{"key": key, "path": key} for key in (CA_KEY, CERT_KEY, PRIVATE_KEY_KEY)],
                },
            }
        ]
    pod_spec = builders.with_pull_secrets(pod_spec, builders.image_pull_secrets(spec))
    labels = {
        "app.kubernetes.io/name": "etcd-benchmark",
        "app.kubernetes.io/managed-by": MANAGED_BY,
        LABEL_BENCHMARK_OF: cluster,
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": DEADLINE_SECONDS,
            "ttlSecondsAfterFinished": KEEP_SECONDS,
            "template": {"metadata": {"labels": labels}, "spec": pod_security.restricted(pod_spec)},
        },
    }


def finished(job: Mapping[str, Any]) -> bool | None:
    """True: the check passed (etcdctl exited 0); False: it failed or could not run; None: running."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("status") == "True" and condition.get("type") in ("Complete", "Failed"):
            return condition["type"] == "Complete"
    return None


def verdicts(log: str) -> list[str]:
    """etcdctl's report lines, as it printed them, in order, without its progress bar."""
    return [found.group(1) for line in log.splitlines() if (found := REPORT.search(line.strip()))]
