"""`kubectl etcd logs` and `report`: the operator's own log lines (runtime/logs.py, in both
formats) filtered to one cluster, and a support bundle with no secret in it."""

from __future__ import annotations

import asyncio
import io
import json
import tarfile

import kopf
import yaml

from etcd_operator_kubectl import cli, report, views
from tests.unit import test_operator_logs
from tests.unit.cluster_scenarios import CLUSTER, NAMESPACE
from tests.unit.test_kubectl_etcd_views import RUNNING, backup_object, cluster_after, observed, three_runs
from tests.unit.test_operator_logs import CLUSTER_BODY, a_failing_pass

OTHER_BODY = {**CLUSTER_BODY, "metadata": {**CLUSTER_BODY["metadata"], "name": "other", "uid": "u-other"}}
# What a report may meet, each planted where it could arrive in a real bundle.
SESSION_TOKEN = "FwoGZXIvYXdzEXAMPLESESSIONTOKEN"
PASSWORD = "hunter2-not-for-support"
PRIVATE_KEY = (
    "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg4LVWM9nuwNSk3yBMbPmaHUmtxNWGp0kP1c\n-----END EC PRIVATE KEY-----"
)
BEARER = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2EifQ.c2lnbmF0dXJl"

configured = test_operator_logs.configured  # the fixture: the operator's log setup, and its stderr


def object_logger(body: dict) -> kopf.ObjectLogger:
    settings = kopf.OperatorSettings()
    settings.posting.enabled = False
    return kopf.ObjectLogger(body=body, settings=settings)


def operator_log(configured, log_format: str) -> str:
    output = configured(log_format)
    a_failing_pass()  # about the cluster, with a traceback
    object_logger(OTHER_BODY).info("a pass over another cluster")
    try:
        raise RuntimeError(
            f"S3 refused: {{'X-Amz-Security-Token': '{SESSION_TOKEN}', 'Authorization': 'Bearer {BEARER}'}}"
        )
    except RuntimeError:
        object_logger(CLUSTER_BODY).exception("backup upload failed")
    return output()


def test_logs_keeps_the_lines_about_one_cluster_in_plain_text_with_their_tracebacks(configured):
    text = operator_log(configured, "plain")
    kept = views.lines_about(text, NAMESPACE, CLUSTER)
    assert any("reconcile failed: the API server went away" in line for line in kept)
    assert any(line.startswith("Traceback") for line in kept)  # the record's continuation lines
    assert any("RuntimeError: the API server went away" in line for line in kept)
    assert not any("another cluster" in line or "not about any object" in line for line in kept)
    assert len(kept) < len(text.splitlines())


def test_logs_keeps_the_lines_about_one_cluster_in_json(configured):
    text = operator_log(configured, "json")
    kept = [json.loads(line) for line in views.lines_about(text, NAMESPACE, CLUSTER)]
    assert {line["object"]["name"] for line in kept} == {CLUSTER}
    assert any(line["message"].startswith("reconcile failed") for line in kept)
    everything = [json.loads(line) for line in text.splitlines()]
    assert len(kept) == len([line for line in everything if (line.get("object") or {}).get("name") == CLUSTER])
    assert len(kept) < len(everything)


class ReportKube:
    """What `report` reads: the three kinds, events and the operator pods' logs."""

    def __init__(self, cluster, backups, restores, events, logs):
        self.cluster, self.backups, self.restores, self.events_, self.logs = cluster, backups, restores, events, logs

    async def get(self, namespace, plural, name):
        return self.cluster

    async def list_objects(self, namespace, plural):
        return {"etcdbackups": self.backups, "etcdrestores": self.restores}[plural]

    async def events(self, namespace):
        return self.events_

    async def pod_logs(self, namespace, selector, tail):
        assert selector == cli.OPERATOR_SELECTOR
        return self.logs


def report_inputs(log: str) -> ReportKube:
    cluster = cluster_after({"size": 3}, observed([]), observed(RUNNING))
    applied = {  # kubectl's copy of what was applied: the API server pruned the stray field, kubectl kept it
        "apiVersion": "etcd.operator.dev/v1alpha1",
        "kind": "EtcdCluster",
        "metadata": {"name": CLUSTER, "namespace": NAMESPACE},
        "spec": {"size": 3, "auth": {"password": PASSWORD}},
    }
    cluster = {
        "apiVersion": "etcd.operator.dev/v1alpha1",
        "kind": "EtcdCluster",
        **cluster,
        "metadata": {**cluster["metadata"], "annotations": {report.LAST_APPLIED: json.dumps(applied)}},
    }
    backup = backup_object(three_runs())
    stray = {**backup_object({}), "metadata": {"name": "elsewhere", "namespace": NAMESPACE}}
    stray["spec"] = {"clusterRef": {"name": "other"}}
    restore = {
        "kind": "EtcdRestore",
        "metadata": {"name": "r1", "namespace": NAMESPACE},
        "spec": {
            "source": {"backupRef": {"name": backup["metadata"]["name"]}},
            "target": {"newCluster": {"name": "copy"}},
        },
    }
    events = [
        {
            "involvedObject": {"kind": "EtcdCluster", "name": CLUSTER},
            "reason": "TLSSecretInvalid",
            "message": f"cannot read the member certificate: {PRIVATE_KEY}",
        },
        {"involvedObject": {"kind": "EtcdCluster", "name": "other"}, "reason": "Scaled", "message": "not ours"},
    ]
    return ReportKube(cluster, [backup, stray], [restore], events, {"etcd-operator-abc": log})


def read_bundle(path) -> dict[str, str]:
    with tarfile.open(path, "r:gz") as tar:
        return {m.name.split("/", 1)[1]: tar.extractfile(m).read().decode() for m in tar.getmembers()}


def test_the_report_bundles_the_clusters_objects_events_and_logs_with_every_secret_redacted(
    configured,
    tmp_path,
):
    log = operator_log(configured, "plain")
    assert SESSION_TOKEN in log and BEARER in log  # the operator's log, as the pod wrote it
    path = tmp_path / "r.tar.gz"
    args = cli.parser().parse_args(["report", CLUSTER, "-f", str(path)])
    assert asyncio.run(cli.cmd_report(args, report_inputs(log), NAMESPACE)) == 0
    files = read_bundle(path)
    assert set(files) == {
        f"etcdcluster-{CLUSTER}.yaml",
        "etcdbackup-nightly.yaml",
        "etcdrestore-r1.yaml",
        "events.yaml",
        "operator-logs/etcd-operator-abc.log",
    }
    everything = "".join(files.values())
    for secret in (SESSION_TOKEN, PASSWORD, BEARER, "MHcCAQEEIBkg4LVWM9nuwNSk3yBMbPmaHUmtxNWGp0kP1c"):
        assert secret not in everything, secret
    cluster = yaml.safe_load(files[f"etcdcluster-{CLUSTER}.yaml"])
    assert cluster["status"]["quota"] == {"backendBytes": 832 * 1024 * 1024}  # the status is kept whole
    assert json.loads(cluster["metadata"]["annotations"][report.LAST_APPLIED])["spec"] == {
        "size": 3,
        "auth": {"password": report.REDACTED},
    }
    backup = yaml.safe_load(files["etcdbackup-nightly.yaml"])
    assert [r["revision"] for r in backup["status"]["recentBackups"]] == [180, 150, 100]
    assert [e["reason"] for e in yaml.safe_load(files["events.yaml"])] == ["TLSSecretInvalid"]
    log_kept = files["operator-logs/etcd-operator-abc.log"]
    assert "reconcile failed: the API server went away" in log_kept and "X-Amz-Security-Token" in log_kept
    assert path.stat().st_mode & 0o077 == 0  # readable by its owner only


def test_a_secret_object_keeps_its_key_names_and_loses_its_values():
    secret = {
        "kind": "Secret",
        "metadata": {"name": "s3"},
        "data": {"accessKeyID": "QUtJQQ==", "secretAccessKey": "c2Vj"},
    }
    assert report.redact(secret)["data"] == {"accessKeyID": report.REDACTED, "secretAccessKey": report.REDACTED}
    ref = {"credentialsSecretRef": {"name": "s3", "accessKeyIDKey": "accessKeyID"}, "key": "p/ns/b/x.db"}
    assert report.redact(ref) == ref  # names of Secrets and keys, and snapshot keys, are no secrets


def test_the_bundle_is_a_tar_gz_of_yaml_and_text():
    data = report.bundle({"a/x.yaml": {"k": [1]}, "a/y.log": f"token={BEARER}"}, 0)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        assert tar.extractfile("a/x.yaml").read() == b"k:\n- 1\n"
        assert tar.extractfile("a/y.log").read() == f"token={report.REDACTED}".encode()


def test_logs_prints_the_lines_about_the_cluster_from_every_operator_pod(configured, capsys):
    log = operator_log(configured, "plain")
    kube = report_inputs(log)
    kube.logs = {"etcd-operator-b": log, "etcd-operator-a": "2026-12-02 11:00:00,000 INFO leader elsewhere"}
    capsys.readouterr()
    assert asyncio.run(cli.cmd_logs(cli.parser().parse_args(["logs", CLUSTER]), kube, NAMESPACE)) == 0
    out = capsys.readouterr().out.splitlines()
    assert out and all(line.startswith("[pod/etcd-operator-b] ") for line in out)
    assert any("reconcile failed" in line for line in out)
