"""The hand-written CRDs on the real API server: each kind can be created, read and
listed, and clearly invalid objects are refused with a readable message."""

from __future__ import annotations

import json
import pathlib

import pytest
import yaml

from tests.support.kubectl import kubectl, kubectl_json

pytestmark = pytest.mark.substrate

CRDS = pathlib.Path(__file__).resolve().parents[2] / "crds"
GROUP = "etcd.operator.dev/v1alpha1"

VALID = {
    "EtcdCluster": {"size": 3, "version": "3.6.16"},
    "EtcdBackup": {"clusterRef": {"name": "demo"}, "storage": {"s3": {"bucket": "etcd-backups"}}},
    "EtcdRestore": {
        "source": {"backupRef": {"name": "demo"}},
        "target": {"newCluster": {"name": "restored"}},
    },
}


@pytest.fixture(scope="module")
def crds(substrate):
    kubectl("apply", "--server-side", "--force-conflicts", "-k", str(CRDS))
    kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")


def manifest(kind: str, name: str, namespace: str, spec: dict) -> str:
    return json.dumps({"apiVersion": GROUP, "kind": kind,
                       "metadata": {"name": name, "namespace": namespace}, "spec": spec})


def test_every_crd_is_structural_with_status_printer_columns_and_short_names():
    for path in sorted(p for p in CRDS.glob("*.yaml") if p.name != "kustomization.yaml"):
        crd = yaml.safe_load(path.read_text())
        version = crd["spec"]["versions"][0]
        assert version["subresources"]["status"] == {}, path.name
        assert version["additionalPrinterColumns"], path.name
        assert crd["spec"]["names"]["shortNames"], path.name
        assert version["schema"]["openAPIV3Schema"]["type"] == "object", path.name


@pytest.mark.parametrize("kind", sorted(VALID))
def test_create_get_and_list(crds, namespace, kind):
    kubectl("apply", "-f", "-", input=manifest(kind, "demo", namespace, VALID[kind]))
    got = kubectl_json("get", kind.lower(), "demo", "-n", namespace)
    assert got["kind"] == kind and got["metadata"]["name"] == "demo"
    listed = kubectl_json("get", kind.lower(), "-n", namespace)
    assert [item["metadata"]["name"] for item in listed["items"]] == ["demo"]
    table = kubectl("get", kind.lower(), "-n", namespace).stdout
    assert "AGE" in table.splitlines()[0]


INVALID = [
    ("EtcdCluster", {"size": -1}, "should be greater than or equal to 1"),
    ("EtcdCluster", {"size": "three"}, "must be of type integer"),
    ("EtcdCluster", {"size": 10}, "should be less than or equal to 9"),
    ("EtcdCluster", {"version": "3.4.27"}, "supported etcd release: 3.5.x or 3.6.x"),
    ("EtcdCluster", {"storage": {"emptyDir": {}, "size": "1Gi"}}, "use either emptyDir or a PVC"),
    ("EtcdBackup", {"clusterRef": {"name": "x"}, "storage": {"s3": {"bucket": "b"}}}, "at least 3 chars"),
    ("EtcdBackup", {"clusterRef": {"name": "x"}, "schedule": "* * *", "storage": {"s3": {"bucket": "bkt"}}},
     "cron expression with 5 fields"),
    ("EtcdRestore", {"source": {}, "target": {"newCluster": {"name": "n"}}},
     "exactly one of backupRef or s3"),
    ("EtcdRestore", {"source": {"backupRef": {"name": "b"}}, "target": {"inPlace": {"clusterName": "c", "confirm": False}}},
     "confirm must be true"),
]


@pytest.mark.parametrize("kind,spec,message", INVALID, ids=[m for _, _, m in INVALID])
def test_invalid_objects_are_refused_with_a_readable_message(crds, namespace, kind, spec, message):
    refused = kubectl("apply", "-f", "-", input=manifest(kind, "bad", namespace, spec), check=False)
    assert refused.returncode != 0
    assert message in refused.stderr
    assert kubectl("get", kind.lower(), "bad", "-n", namespace, check=False).returncode != 0


def test_restore_spec_cannot_change(crds, namespace):
    kubectl("apply", "-f", "-", input=manifest("EtcdRestore", "once", namespace, VALID["EtcdRestore"]))
    changed = {**VALID["EtcdRestore"], "target": {"newCluster": {"name": "other"}}}
    refused = kubectl("apply", "-f", "-", input=manifest("EtcdRestore", "once", namespace, changed), check=False)
    assert refused.returncode != 0 and "runs once" in refused.stderr
