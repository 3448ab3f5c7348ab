"""Upgrading the operator as docs/operations/upgrading-the-operator.md tells users: a release of
the previous chart (its CRDs in the chart's crds/, which Helm installs once and never
upgrades), a running cluster and a scheduled EtcdBackup that has completed a backup to the
substrate's MinIO, then `helm upgrade --take-ownership` to this checkout's chart, whose CRDs are
templates. The upgrade must update the CRDs (a field the old schema pruned is kept afterwards),
keep what the backup's status recorded (the previous operator's record of its backup is still
there, field for field, after the new operator has written the status), let the schedule carry
on (the new operator backs up a write made after the previous operator's pod was gone), and
leave the member pod alone through all of it (same pod, no container restart).

The previous chart is taken from git: the parent of the commit that deleted the chart's crds/.
Its CRDs equal crds/ but for the chart's keep annotation, so `spec.pod.imagePullSecrets` is
taken out of its EtcdCluster schema to stand for a field an older release did not know; that
field rolls no member (builders.pod_spec_hash leaves it out), so only the upgrade itself could.
Its EtcdBackup CRD is left as the session's: the previous one lacks fields (a backup's
authRevision) that the backups of other runs on the same nodes write meanwhile. Both charts run
this checkout's image, so the upgrade also sets an environment variable the operator does not
read: the pod template changes as with a new release's image, and the operator's pod is replaced.
The CRDs are shared with the other tests on the nodes: they get back the full schema and the
Helm owner they had."""

from __future__ import annotations

import asyncio
import json
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest
import yaml

from etcd_operator.clients.etcd.client import EtcdMemberClient
from tests.support import chart_release, claims
from tests.support.backups import get_backup
from tests.support.clusters import (
    GROUP,
    PLAINTEXT,
    get_cluster,
    member_endpoints,
    member_pods,
    patch_spec,
    wait_healthy,
)
from tests.support.helm import CHART, helm
from tests.support.kubectl import kubectl, kubectl_json
from tests.support.s3 import Store, create_credentials_secret, s3_storage_spec
from tests.support.waiting import wait_for

pytestmark = [
    pytest.mark.needs_nodes,
    pytest.mark.needs_release,
    pytest.mark.needs_store,
    pytest.mark.usefixtures("kubectl_on_real_nodes"),
]

ROOT = Path(__file__).resolve().parents[2]
RELEASE = "upgrade-test"
CRD = "etcdclusters.etcd.operator.dev"
LEGACY_CRD = "charts/etcd-operator/crds/etcdclusters.yaml"
CRDS = [f"{plural}.etcd.operator.dev" for plural in ("etcdclusters", "etcdbackups", "etcdrestores")]
# What ties a CRD to a Helm release, and the keep policy.
HELM_ANNOTATIONS = ("meta.helm.sh/release-name", "meta.helm.sh/release-namespace", "helm.sh/resource-policy")
HELM_LABEL = "app.kubernetes.io/managed-by"
BACKUP = "every-10s"
# The fields of an EtcdBackup's status that record backups taken: a later run adds to them.
RECORDS = ("lastBackup", "lastSuccessfulTime", "recentBackups", "clusterIDHistory", "lastScheduleTime")
# Both charts run the same image, so their Deployments are alike and an upgrade would keep the
# operator's pod; this variable, which the operator does not read, changes the pod template as
# a new release's image does, so that the upgraded operator is a new process.
NEXT_RELEASE_ENV = [{"name": "UPGRADE_TEST_NEXT_RELEASE", "value": "true"}]


def previous_chart(into: Path) -> Path:
    """The chart as of the last commit whose CRDs sat in its crds/ folder, with the EtcdCluster
    schema lacking spec.pod.imagePullSecrets."""

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, check=True)

    deleted = git("log", "-1", "--diff-filter=D", "--format=%H", "--", LEGACY_CRD).stdout.decode().strip()
    assert deleted, f"no commit deleted {LEGACY_CRD}"
    archive = into / "chart.tar"
    archive.write_bytes(git("archive", f"{deleted}^:charts/etcd-operator").stdout)
    chart = into / "etcd-operator"
    with tarfile.open(archive) as tar:
        tar.extractall(chart, filter="data")
    crd_file = chart / "crds" / "etcdclusters.yaml"
    crd = yaml.safe_load(crd_file.read_text())
    pod = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["pod"]
    del pod["properties"]["imagePullSecrets"]
    crd_file.write_text(yaml.safe_dump(crd, sort_keys=False))
    return chart


def pull_secrets(namespace: str, name: str) -> list | None:
    return (get_cluster(namespace, name)["spec"].get("pod") or {}).get("imagePullSecrets")


def helm_metadata() -> dict[str, tuple[dict, str | None]]:
    """Each CRD's Helm annotations and label: the release that holds the CRDs (the session's)
    gets them back, so that its next install or upgrade finds them its own."""
    found = {}
    for name in CRDS:
        metadata = kubectl_json("get", "crd", name)["metadata"]
        crd_annotations = metadata.get("annotations") or {}
        found[name] = (
            {key: crd_annotations.get(key) for key in HELM_ANNOTATIONS},
            (metadata.get("labels") or {}).get(HELM_LABEL),
        )
    return found


def put_back(metadata: dict[str, tuple[dict, str | None]]) -> None:
    for name, (crd_annotations, label) in metadata.items():
        changes = [f"{key}={value}" if value is not None else f"{key}-" for key, value in crd_annotations.items()]
        kubectl("annotate", "crd", name, "--overwrite", *changes)
        kubectl("label", "crd", name, "--overwrite", f"{HELM_LABEL}={label}" if label is not None else f"{HELM_LABEL}-")


def members(namespace: str, name: str) -> dict[str, list[int]]:
    return {
        pod["metadata"]["uid"]: [c["restartCount"] for c in pod["status"].get("containerStatuses", [])]
        for pod in member_pods(namespace, name)
    }


def operator_pods() -> set[str]:
    pods = kubectl_json("get", "pods", "-n", RELEASE, "-l", f"app.kubernetes.io/instance={RELEASE}")["items"]
    return {pod["metadata"]["name"] for pod in pods}


def apply_backup(namespace: str, store: Store) -> None:
    """A backup of `up` every ten seconds to the substrate's MinIO, unverified (a scratch pod
    per backup would cost more than the upgrade)."""
    manifest = {
        "apiVersion": GROUP,
        "kind": "EtcdBackup",
        "metadata": {"name": BACKUP, "namespace": namespace},
        "spec": {
            "clusterRef": {"name": "up"},
            "schedule": "* * * * * */10",
            "verification": {"enabled": False},
            "storage": s3_storage_spec(store, f"upgrade-{namespace}"),
        },
    }
    kubectl("apply", "-f", "-", input=json.dumps(claims.claim(manifest, RELEASE)))


def backed_up(namespace: str, revision: int) -> dict | None:
    """The backup's status once its last backup holds `revision`."""
    status = get_backup(namespace, BACKUP).get("status") or {}
    return status if (status.get("lastBackup") or {}).get("revision", 0) >= revision else None


def put(namespace: str, key: str) -> int:
    """Writes `key` into `up`; the revision of the write."""

    async def write() -> int:
        async with EtcdMemberClient(member_endpoints(namespace, "up")[0], timeout=10) as client:
            return await client.put(key.encode(), b"1")

    return asyncio.run(write())


def test_helm_upgrade_from_the_previous_chart_updates_the_crds_keeps_backups_and_restarts_no_member(
    real_nodes, namespace
):
    kubeconfig = str(real_nodes.kubeconfig)
    values = {
        "replicas": 1,
        "watchNamespaces": [namespace],
        "shard": {"name": RELEASE, "selector": claims.shard_env(RELEASE)["SHARD_SELECTOR"]},
    }
    create_credentials_secret(real_nodes, namespace)
    kubectl("apply", "--server-side", "-k", str(ROOT / "crds"))  # as the session's release finds them
    kubectl("wait", "--for=condition=Established", *(f"crd/{name}" for name in CRDS), "--timeout=60s")
    found = helm_metadata()
    with tempfile.TemporaryDirectory() as tmp:
        old_chart = previous_chart(Path(tmp))
        values_file = Path(tmp) / "values.json"
        values_file.write_text(json.dumps(values))
        next_values_file = Path(tmp) / "next-values.json"
        next_values_file.write_text(json.dumps({**values, "extraEnv": NEXT_RELEASE_ENV}))
        # The cluster as a user of the previous chart has it: its CRDs, which Helm created
        # from crds/ without any owner of its own.
        old_crd = yaml.safe_load((old_chart / "crds" / "etcdclusters.yaml").read_text())
        old_crd["metadata"]["resourceVersion"] = kubectl_json("get", "crd", CRD)["metadata"]["resourceVersion"]
        kubectl("replace", "-f", "-", input=json.dumps(old_crd))
        kubectl("wait", "--for=condition=Established", f"crd/{CRD}", "--timeout=60s")
        chart_release.restricted_namespace(RELEASE)
        release = ["-n", RELEASE, "--kubeconfig", kubeconfig, "--wait", "--timeout", "180s"]
        try:
            helm("install", RELEASE, str(old_chart), "-f", str(values_file), *release)
            manifest = {
                "apiVersion": "etcd.operator.dev/v1alpha1",
                "kind": "EtcdCluster",
                "metadata": {"name": "up", "namespace": namespace},
                "spec": {**PLAINTEXT, "size": 1, "storage": {"size": "1Gi"}},
            }
            kubectl("apply", "-f", "-", input=json.dumps(claims.claim(manifest, RELEASE)))
            wait_healthy(namespace, "up", 1, timeout=300)
            patch_spec(namespace, "up", {"pod": {"imagePullSecrets": [{"name": "registry-before"}]}})
            assert pull_secrets(namespace, "up") is None, "the previous schema should prune the field"
            before = members(namespace, "up")
            assert len(before) == 1, before
            apply_backup(namespace, real_nodes)
            kept = put(namespace, "/before-upgrade")
            taken = wait_for(lambda: backed_up(namespace, kept), 120, what="a backup by the previous operator")
            record = taken["lastBackup"]
            assert {"key", "revision", "sha256", "clusterID", "authRevision", "completionTime"} <= record.keys(), record
            previous_operator = [f"pod/{pod}" for pod in operator_pods()]
            assert previous_operator, f"no operator pod in {RELEASE}"

            helm("upgrade", RELEASE, str(CHART), "--take-ownership", "-f", str(next_values_file), *release)

            patch_spec(namespace, "up", {"pod": {"imagePullSecrets": [{"name": "registry-after"}]}})
            assert pull_secrets(namespace, "up") == [{"name": "registry-after"}], "the upgrade left the old schema"
            crd_annotations = kubectl_json("get", "crd", CRD)["metadata"].get("annotations") or {}
            assert crd_annotations.get("helm.sh/resource-policy") == "keep", crd_annotations
            assert crd_annotations.get("meta.helm.sh/release-name") == RELEASE, crd_annotations
            # The schedule carries on in the new operator: a backup of a write made once the
            # previous operator's pod was gone can only be the new one's.
            replaced = kubectl("wait", "--for=delete", "-n", RELEASE, *previous_operator, "--timeout=90s", check=False)
            assert replaced.returncode == 0, f"the upgrade kept the operator's pod: {replaced.stderr}"
            new = put(namespace, "/after-upgrade")
            after = wait_for(lambda: backed_up(namespace, new), 120, what="a backup by the upgraded operator")
            assert after["lastBackup"]["key"] != record["key"], after["lastBackup"]
            assert "authRevision" in after["lastBackup"], after["lastBackup"]
            # What the previous operator recorded is kept as it was: no field pruned.
            assert [field for field in RECORDS if field not in after] == [], after
            recent = {r["key"]: r for r in after["recentBackups"]}
            assert recent.get(record["key"]) == record, f"the previous operator's record changed: {record} {recent}"
            assert after["clusterIDHistory"] == taken["clusterIDHistory"], after
            wait_healthy(namespace, "up", 1, timeout=120)
            assert members(namespace, "up") == before, "the upgrade restarted a member"

            kubectl("delete", "etcdbackup", BACKUP, "-n", namespace, "--timeout=60s")
            kubectl("delete", "etcdcluster", "up", "-n", namespace, "--timeout=120s")
            helm("uninstall", RELEASE, "-n", RELEASE, "--kubeconfig", kubeconfig, "--wait")
            assert kubectl("get", "crd", CRD, check=False).returncode == 0, "uninstalling the chart took the CRDs"
        finally:
            kubectl("delete", "etcdbackups", "--all", "-n", namespace, "--timeout=60s", check=False)
            kubectl("delete", "etcdclusters", "--all", "-n", namespace, "--timeout=120s", check=False)
            helm("uninstall", RELEASE, "-n", RELEASE, "--kubeconfig", kubeconfig, "--wait", check=False)
            chart_release.delete_namespace(RELEASE)
            # The CRDs as every other test expects them, whatever happened above.
            kubectl("apply", "--server-side", "--force-conflicts", "-k", str(ROOT / "crds"))
            put_back(found)
