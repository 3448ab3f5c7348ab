"""Writes the OLM bundle (registry+v1) of the operator into build/bundle/.

    python hack/olm_bundle.py               # what `make bundle` runs
    python hack/olm_bundle.py --out DIR     # somewhere else

Everything comes from the sources of truth, nothing is written by hand twice:
- manifests/: the three CRDs copied byte for byte from crds/, the metrics Service and the
  PodDisruptionBudget of deploy/, and the ClusterServiceVersion;
- the CSV's install strategy: deploy/'s Deployment spec (plus WATCH_NAMESPACES read from
  OLM's olm.targetNamespaces annotation, so every install mode watches what the
  OperatorGroup targets), deploy/rbac.yaml's ClusterRole split into cluster-scoped rules
  (clusterPermissions) and namespaced ones (permissions, with the leader-election Role's);
- descriptions: README's introduction and feature table, each CRD's schema descriptions;
- alm-examples: objects of the three kinds from examples/;
- the version: pyproject.toml's; the image: deploy/kustomization.yaml's; the icon:
  packaging/olm/icon.svg.
Output is deterministic: same tree, same bytes. Standard library and pyyaml only.
"""

from __future__ import annotations

import argparse
import base64
import copy
import json
import re
import shutil
import tomllib
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "build" / "bundle"
PACKAGE = "etcd-operator"
CHANNEL = "candidate"  # OLM's channel naming: candidate, fast, stable
MATURITY = "alpha"  # the API is v1alpha1
ICON = ROOT / "packaging" / "olm" / "icon.svg"
MIN_KUBE_VERSION = "1.30.0"  # the CRDs' CEL rules (docs/install.md)
# OLM's capability levels: Basic Install, Seamless Upgrades, Full Lifecycle, Deep Insights,
# Auto Pilot. Why this one: docs/install.md#olm.
CAPABILITIES = "Deep Insights"
# The examples whose objects of the three kinds become alm-examples, first one per kind first.
EXAMPLES = ("etcdcluster.yaml", "backup-minio-scheduled.yaml", "restore-new-cluster.yaml")
# Resources deploy/rbac.yaml grants that are not namespaced: OLM binds these cluster-wide in
# every install mode; the rest become Roles in the watched namespaces (or cluster-wide in
# AllNamespaces mode).
CLUSTER_SCOPED = {
    ("apiextensions.k8s.io", "customresourcedefinitions"),
    ("", "namespaces"),
    ("", "nodes"),
    ("", "persistentvolumes"),
    ("storage.k8s.io", "storageclasses"),
}
WATCH_NAMESPACES_FROM_OLM = {
    "name": "WATCH_NAMESPACES",
    "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['olm.targetNamespaces']"}},
}
# The main fields shown in consoles, by kind: (path, display name, x-descriptors). Descriptions come from the
# CRD schema; a path the schema lacks fails the build.
SPEC_DESCRIPTORS: dict[str, list[tuple[str, str, list[str]]]] = {
    "EtcdCluster": [
        ("size", "Members", ["urn:alm:descriptor:com.tectonic.ui:podCount"]),
        ("version", "etcd Version", ["urn:alm:descriptor:com.tectonic.ui:text"]),
        ("storage.size", "Volume Size", ["urn:alm:descriptor:com.tectonic.ui:text"]),
        ("storage.storageClassName", "Storage Class", ["urn:alm:descriptor:io.kubernetes:StorageClass"]),
        (
            "reclaimPolicy",
            "Reclaim Policy",
            ["urn:alm:descriptor:com.tectonic.ui:select:Retain", "urn:alm:descriptor:com.tectonic.ui:select:Delete"],
        ),
        ("paused", "Paused", ["urn:alm:descriptor:com.tectonic.ui:booleanSwitch"]),
    ],
    "EtcdBackup": [
        ("clusterRef.name", "Cluster", ["urn:alm:descriptor:io.kubernetes:etcd.operator.dev:v1alpha1:EtcdCluster"]),
        ("schedule", "Schedule", ["urn:alm:descriptor:com.tectonic.ui:text"]),
        ("suspend", "Suspended", ["urn:alm:descriptor:com.tectonic.ui:booleanSwitch"]),
        ("storage.s3.bucket", "S3 Bucket", ["urn:alm:descriptor:com.tectonic.ui:text"]),
        ("storage.s3.credentialsSecretRef.name", "S3 Credentials Secret", ["urn:alm:descriptor:io.kubernetes:Secret"]),
    ],
    "EtcdRestore": [
        (
            "source.backupRef.name",
            "Source Backup",
            ["urn:alm:descriptor:io.kubernetes:etcd.operator.dev:v1alpha1:EtcdBackup"],
        ),
        ("target.newCluster.name", "New Cluster", ["urn:alm:descriptor:com.tectonic.ui:text"]),
    ],
}
STATUS_DESCRIPTORS: dict[str, list[tuple[str, str, list[str]]]] = {
    "EtcdCluster": [
        ("phase", "Phase", ["urn:alm:descriptor:io.kubernetes.phase"]),
        ("readyMembers", "Ready Members", ["urn:alm:descriptor:text"]),
        ("leader", "Leader", ["urn:alm:descriptor:text"]),
        ("currentVersion", "Current Version", ["urn:alm:descriptor:text"]),
        ("clientURL", "Client URL", ["urn:alm:descriptor:text"]),
        ("conditions", "Conditions", ["urn:alm:descriptor:io.kubernetes.conditions"]),
    ],
    "EtcdBackup": [
        ("phase", "Phase", ["urn:alm:descriptor:io.kubernetes.phase"]),
        ("lastSuccessfulTime", "Last Successful Backup", ["urn:alm:descriptor:timestamp"]),
        ("nextScheduleTime", "Next Scheduled Backup", ["urn:alm:descriptor:timestamp"]),
        ("conditions", "Conditions", ["urn:alm:descriptor:io.kubernetes.conditions"]),
    ],
    "EtcdRestore": [
        ("phase", "Phase", ["urn:alm:descriptor:io.kubernetes.phase"]),
        ("targetCluster", "Target Cluster", ["urn:alm:descriptor:text"]),
        ("restoredRevision", "Restored Revision", ["urn:alm:descriptor:text"]),
        ("completionTime", "Completed", ["urn:alm:descriptor:timestamp"]),
        ("conditions", "Conditions", ["urn:alm:descriptor:io.kubernetes.conditions"]),
    ],
}
# For the descriptors whose field the schema leaves undescribed (a description in the schema
# wins; one here beside it fails the build, so the CRD stays the source).
UNDESCRIBED_FIELDS = {
    (
        "EtcdCluster",
        "status.phase",
    ): "The cluster's phase: Creating, Running, Scaling, Upgrading, Degraded, QuorumLost, Recovering, and others.",
    ("EtcdCluster", "status.readyMembers"): "Members whose pod is ready and whose etcd answers.",
    ("EtcdCluster", "status.leader"): "The member that leads raft now.",
    ("EtcdCluster", "status.currentVersion"): "The etcd version every member runs.",
    ("EtcdCluster", "status.clientURL"): "Where clients reach the cluster (its client Service).",
    ("EtcdBackup", "spec.clusterRef.name"): "The EtcdCluster in this namespace to back up.",
    ("EtcdBackup", "spec.suspend"): "Pause a scheduled backup.",
    ("EtcdBackup", "spec.storage.s3.bucket"): "The bucket the snapshots go to.",
    ("EtcdBackup", "spec.storage.s3.credentialsSecretRef.name"): "The Secret with accessKeyID and secretAccessKey.",
    ("EtcdBackup", "status.lastSuccessfulTime"): "When the last backup completed.",
    ("EtcdBackup", "status.nextScheduleTime"): "When the schedule runs next.",
    ("EtcdRestore", "status.targetCluster"): "The EtcdCluster restored into.",
    ("EtcdRestore", "status.completionTime"): "When the restore finished.",
}
# What an EtcdCluster makes, for consoles' resource view.
CLUSTER_RESOURCES = [
    ("Pod", "v1"),
    ("PersistentVolumeClaim", "v1"),
    ("Service", "v1"),
    ("Secret", "v1"),
    ("PodDisruptionBudget", "v1"),
    ("NetworkPolicy", "v1"),
]


def load_all(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if isinstance(doc, dict)]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    if len(found) != 1:
        raise SystemExit(f"olm_bundle: expected one {kind} {name or ''}, found {len(found)}")
    return found[0]


def version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def image() -> str:
    kustomization = yaml.safe_load((ROOT / "deploy" / "kustomization.yaml").read_text())
    (entry,) = kustomization["images"]
    return f"{entry.get('newName', entry['name'])}:{entry['newTag']}"


def crds() -> dict[str, tuple[Path, dict[str, Any]]]:
    """The CRD files of crds/kustomization.yaml by kind, in its order."""
    listed = yaml.safe_load((ROOT / "crds" / "kustomization.yaml").read_text())["resources"]
    found = {}
    for name in listed:
        path = ROOT / "crds" / name
        crd = one(load_all(path), "CustomResourceDefinition")
        found[crd["spec"]["names"]["kind"]] = (path, crd)
    return found


def served_version(crd: dict[str, Any]) -> dict[str, Any]:
    (stored,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
    return stored


def field_description(crd: dict[str, Any], root: str, path: str) -> str:
    """The schema's description of root.path, else the one of UNDESCRIBED_FIELDS."""
    kind = crd["spec"]["names"]["kind"]
    node = served_version(crd)["schema"]["openAPIV3Schema"]["properties"][root]
    for part in path.split("."):
        properties = node.get("properties", {})
        if part not in properties:
            raise SystemExit(f"olm_bundle: {kind} has no field {root}.{path}")
        node = properties[part]
    fallback = UNDESCRIBED_FIELDS.get((kind, f"{root}.{path}"))
    if node.get("description") and fallback:
        raise SystemExit(f"olm_bundle: {kind} {root}.{path} is described in its CRD; drop it from UNDESCRIBED_FIELDS")
    description = node.get("description") or fallback
    if not description:
        raise SystemExit(f"olm_bundle: {kind} {root}.{path} has no description; add one to its CRD")
    return " ".join(description.split())


def descriptors(crd: dict[str, Any], root: str, table: list[tuple[str, str, list[str]]]) -> list[dict[str, Any]]:
    return [
        {
            "path": path,
            "displayName": name,
            "description": field_description(crd, root, path),
            "x-descriptors": x_descriptors,
        }
        for path, name, x_descriptors in table
    ]


def owned_crds(by_kind: dict[str, tuple[Path, dict[str, Any]]]) -> list[dict[str, Any]]:
    owned = []
    for kind, (_, crd) in by_kind.items():
        entry: dict[str, Any] = {
            "name": crd["metadata"]["name"],
            "version": served_version(crd)["name"],
            "kind": kind,
            "displayName": re.sub(r"([a-z])([A-Z])", r"\1 \2", kind),
            "description": served_version(crd)["schema"]["openAPIV3Schema"]["description"],
            "specDescriptors": descriptors(crd, "spec", SPEC_DESCRIPTORS[kind]),
            "statusDescriptors": descriptors(crd, "status", STATUS_DESCRIPTORS[kind]),
        }
        if kind == "EtcdCluster":
            entry["resources"] = [{"kind": k, "name": "", "version": v} for k, v in CLUSTER_RESOURCES]
        owned.append(entry)
    return owned


def alm_examples(kinds: set[str]) -> list[dict[str, Any]]:
    examples = []
    for name in EXAMPLES:
        examples += [doc for doc in load_all(ROOT / "examples" / name) if doc["kind"] in kinds]
    missing = kinds - {e["kind"] for e in examples}
    if missing:
        raise SystemExit(f"olm_bundle: no example of {sorted(missing)} in {EXAMPLES}")
    return examples


def resource_pairs(rule: dict[str, Any]) -> set[tuple[str, str]]:
    return {(group, resource.split("/")[0]) for group in rule["apiGroups"] for resource in rule["resources"]}


def split_permissions(deploy: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """deploy/'s ClusterRole rules as (cluster-scoped, namespaced); the leader-election Role's
    rules join the namespaced ones (OLM creates them in the operator's namespace)."""
    cluster_rules, namespaced_rules = [], []
    for rule in one(deploy, "ClusterRole")["rules"]:
        scoped = resource_pairs(rule) & CLUSTER_SCOPED
        if scoped and scoped != resource_pairs(rule):
            raise SystemExit(f"olm_bundle: a rule mixes cluster-scoped and namespaced resources: {rule}")
        (cluster_rules if scoped else namespaced_rules).append(rule)
    namespaced_rules += one(deploy, "Role")["rules"]
    return cluster_rules, namespaced_rules


def csv_deployment(deployment: dict[str, Any]) -> dict[str, Any]:
    spec = copy.deepcopy(deployment["spec"])
    (container,) = spec["template"]["spec"]["containers"]
    if any(e["name"] == "WATCH_NAMESPACES" for e in container["env"]):
        raise SystemExit("olm_bundle: deploy/'s Deployment sets WATCH_NAMESPACES; OLM sets it from the OperatorGroup")
    container["env"].append(WATCH_NAMESPACES_FROM_OLM)
    return {"name": deployment["metadata"]["name"], "label": deployment["metadata"]["labels"], "spec": spec}


def readme_description() -> str:
    """README's introduction and feature table, without its links (they point into the repository)."""
    text = (ROOT / "README.md").read_text()
    intro = text.split("\n\n")[1]
    table = text.split("| feature |", 1)[1].split("\n\n")[0]
    rows = []
    for line in ("| feature |" + table).splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows.append("| " + " | ".join(cells[:2]) + " |")
    description = intro + "\n\n" + "\n".join(rows)
    return re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", description)


def service_account(deploy: list[dict[str, Any]]) -> str:
    return one(deploy, "ServiceAccount")["metadata"]["name"]


def cluster_service_version(by_kind: dict[str, tuple[Path, dict[str, Any]]]) -> dict[str, Any]:
    deploy_dir = ROOT / "deploy"
    deploy = load_all(deploy_dir / "rbac.yaml") + load_all(deploy_dir / "serviceaccount.yaml")
    deployment = one(load_all(deploy_dir / "deployment.yaml"), "Deployment")
    cluster_rules, namespaced_rules = split_permissions(deploy)
    account = service_account(deploy)
    operator_image = image()
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    if container["image"] != operator_image:
        raise SystemExit(
            f"olm_bundle: deploy/deployment.yaml runs {container['image']}, kustomization {operator_image}"
        )
    release = version()
    if not operator_image.endswith(f":{release}"):
        raise SystemExit(f"olm_bundle: the image {operator_image} is not tagged with the version {release}")
    return {
        "apiVersion": "operators.coreos.com/v1alpha1",
        "kind": "ClusterServiceVersion",
        "metadata": {
            "name": f"{PACKAGE}.v{release}",
            "annotations": {
                "alm-examples": json.dumps(alm_examples(set(by_kind)), indent=2),
                "capabilities": CAPABILITIES,
                "categories": "Database",
                "containerImage": operator_image,
                "description": "etcd clusters, streamed backups to S3 and verified restores, on kopf.",
                "operators.operatorframework.io/suggested-namespace": "etcd-operator",
                "features.operators.openshift.io/disconnected": "false",
            },
        },
        "spec": {
            "displayName": "etcd operator",
            "description": readme_description(),
            "version": release,
            "minKubeVersion": MIN_KUBE_VERSION,
            "maturity": MATURITY,
            "icon": [{"base64data": base64.b64encode(ICON.read_bytes()).decode(), "mediatype": "image/svg+xml"}],
            "provider": {"name": "etcd-operator"},
            "keywords": ["etcd", "key-value", "database", "backup", "restore"],
            "installModes": [
                {"type": "OwnNamespace", "supported": True},
                {"type": "SingleNamespace", "supported": True},
                {"type": "MultiNamespace", "supported": True},
                {"type": "AllNamespaces", "supported": True},
            ],
            "install": {
                "strategy": "deployment",
                "spec": {
                    "deployments": [csv_deployment(deployment)],
                    "clusterPermissions": [{"serviceAccountName": account, "rules": cluster_rules}],
                    "permissions": [{"serviceAccountName": account, "rules": namespaced_rules}],
                },
            },
            "customresourcedefinitions": {"owned": owned_crds(by_kind)},
            "relatedImages": [{"name": "etcd-operator", "image": operator_image}],
        },
    }


ANNOTATIONS = {
    "operators.operatorframework.io.bundle.mediatype.v1": "registry+v1",
    "operators.operatorframework.io.bundle.manifests.v1": "manifests/",
    "operators.operatorframework.io.bundle.metadata.v1": "metadata/",
    "operators.operatorframework.io.bundle.package.v1": PACKAGE,
    "operators.operatorframework.io.bundle.channels.v1": CHANNEL,
    "operators.operatorframework.io.bundle.channel.default.v1": CHANNEL,
}


def bundle_dockerfile() -> str:
    labels = "".join(f"LABEL {key}={value}\n" for key, value in ANNOTATIONS.items())
    return f"FROM scratch\n\n{labels}\nCOPY manifests /manifests/\nCOPY metadata /metadata/\n"


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (alm-examples, the description) as literal blocks."""


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _string)


def dump(document: dict[str, Any]) -> str:
    return yaml.dump(document, Dumper=_BlockDumper, sort_keys=False, width=100, allow_unicode=True)


def write(out: Path) -> None:
    by_kind = crds()
    if out.exists():
        shutil.rmtree(out)
    manifests, metadata = out / "manifests", out / "metadata"
    manifests.mkdir(parents=True)
    metadata.mkdir()
    for path, _ in by_kind.values():
        shutil.copyfile(path, manifests / path.name)
    for name in ("service.yaml", "poddisruptionbudget.yaml"):
        shutil.copyfile(ROOT / "deploy" / name, manifests / f"{PACKAGE}-{name}")
    csv = cluster_service_version(by_kind)
    (manifests / f"{PACKAGE}.clusterserviceversion.yaml").write_text(dump(csv))
    (metadata / "annotations.yaml").write_text(dump({"annotations": ANNOTATIONS}))
    (out / "bundle.Dockerfile").write_text(bundle_dockerfile())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUTPUT)
    args = parser.parse_args()
    write(args.out)
    print(args.out)


if __name__ == "__main__":
    main()
