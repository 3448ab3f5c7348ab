"""tests.support's in-process `get` (tests/support/api_reads.py) answers as kubectl does: the
same objects, lists with each item's apiVersion and kind, and the same refusal for a missing
object. Each case runs kubectl itself beside it, on the session's real nodes."""

from __future__ import annotations

import json
import subprocess

import pytest

from localkube import layout as localkube_layout
from tests.support import api_reads, crds
from tests.support.kubectl import kubectl, kubectl_json

pytestmark = [pytest.mark.needs_cluster]


def kubectl_itself(*args: str) -> subprocess.CompletedProcess:
    binary = localkube_layout.testbin_dir() / "kube" / "kubectl"
    return subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=60)


def without_volatile(listing: dict) -> dict:
    """The objects by name, without what changes between two reads a moment apart."""
    for item in listing.get("items", [listing]):
        item["metadata"].pop("resourceVersion", None)
        item["metadata"].pop("managedFields", None)
        item.pop("status", None)
    return listing


# The lists compared are of objects this module makes, or that nothing changes while the
# other lanes run (nodes and CRDs): pods -A changed between the two reads whenever another
# lane made or deleted a pod.
NAMESPACES = ("api-reads-a", "api-reads-b")
LABEL = "tests.etcd.operator.dev/api-reads=compared"


@pytest.fixture(scope="module")
def crds_installed(kubectl_on_real_nodes):
    """The CRDs read below, whether or not the chart's tests installed them yet."""
    crds.install()


@pytest.fixture(scope="module")
def own_objects(crds_installed):
    manifests = []
    for namespace in NAMESPACES:
        manifests.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        for name in ("first", "second"):
            metadata = {"name": name, "namespace": namespace, "labels": {LABEL.split("=")[0]: "compared"}}
            manifests.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {"k": name}})
    kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests}))
    yield
    kubectl("delete", "namespace", *NAMESPACES, "--ignore-not-found")


@pytest.mark.parametrize(
    "args",
    [
        ("get", "configmaps", "-A", "-l", LABEL),
        ("get", "cm", "-n", NAMESPACES[0], "-l", LABEL),
        ("get", "configmap", "-n", NAMESPACES[1], "--field-selector", "metadata.name=second"),
        ("get", "namespaces", "-l", "kubernetes.io/metadata.name in (api-reads-a,api-reads-b)"),
        ("get", "nodes"),
        ("get", "no", "-l", "kubernetes.io/os=linux"),
        ("get", "crd", "etcdclusters.etcd.operator.dev"),
        ("get", "customresourcedefinitions.apiextensions.k8s.io"),
        ("get", "configmap", "first", f"--namespace={NAMESPACES[0]}"),
    ],
)
def test_a_plain_get_reads_in_process_what_kubectl_prints(own_objects, args):
    query = api_reads.parse_get(args)
    assert query is not None, f"{args} is read by kubectl, not in process"
    reader = api_reads.reader()
    assert reader is not None and reader.resource(query.resource) is not None, f"{query.resource} not resolved"
    in_process = reader.get(query, ["kubectl", *args])
    printed = json.loads(kubectl_itself(*args, "-o", "json").stdout)
    assert in_process is not None and without_volatile(in_process) == without_volatile(printed)
    assert query.name or printed["items"], f"{args} lists nothing: the comparison would say nothing"
    assert without_volatile(kubectl_json(*args)) == without_volatile(printed)


def test_a_missing_object_is_refused_as_kubectl_refuses_it(crds_installed):
    args = ("get", "etcdcluster", "never-made", "-n", "default")
    printed = kubectl_itself(*args, "-o", "json")
    query, reader = api_reads.parse_get(args), api_reads.reader()
    assert query is not None and reader is not None
    with pytest.raises(subprocess.CalledProcessError) as refused:
        reader.get(query, ["kubectl", *args, "-o", "json"])
    assert printed.returncode == refused.value.returncode == 1
    assert refused.value.stderr == printed.stderr
    unchecked = kubectl(*args, "-o", "json", check=False)
    assert (unchecked.returncode, unchecked.stderr) == (1, printed.stderr)


@pytest.mark.parametrize(
    "args",
    [
        ("get", "pods,pvc", "-n", "default"),  # two resources
        ("get", "pods", "-n", "default", "--sort-by=.metadata.name"),  # an option it does not know
        ("get", "pods"),  # the kubeconfig's namespace
        ("apply", "-f", "-"),
    ],
)
def test_anything_else_is_left_to_kubectl(kubectl_on_real_nodes, args):
    query = api_reads.parse_get(args)
    reader = api_reads.reader()
    assert query is None or reader is None or reader.get(query, ["kubectl", *args]) is None
