"""PVCs on real nodes: rancher's local-path-provisioner (the one kind ships), run as a pod
from the image e2e/images builds, with the default StorageClass `localkube`.

Each node keeps its volumes under its own folder of the checkout
(.localkube/nodes/node-<i>/local-path), so that `down --purge` removes them with the rest.
"""

from __future__ import annotations

import json
import pathlib
import subprocess

from images import names as image_names
from images import recipes as image_recipes
from localkube.layout import Layout

NAMESPACE = "local-path-storage"
STORAGE_CLASS = "localkube"
PROVISIONER = "rancher.io/local-path"
SERVICE_ACCOUNT = "local-path-provisioner"
CONFIGMAP = "local-path-config"
READY_TIMEOUT = "120s"
EVICTION_AFTER_SECONDS = 5

# The helper pod runs these in busybox, with VOL_DIR set to the volume's folder.
SETUP_SCRIPT = '#!/bin/sh\nset -eu\nmkdir -m 0777 -p "$VOL_DIR"\n'
TEARDOWN_SCRIPT = '#!/bin/sh\nset -eu\nrm -rf "$VOL_DIR"\n'


def volumes_dir(nodes_dir: pathlib.Path, node: str) -> pathlib.Path:
    return nodes_dir / node / "local-path"


def _helper_pod() -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "helper-pod"},
        "spec": {
            "priorityClassName": "system-node-critical",
            "tolerations": [{"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "helper-pod", "image": image_names.BUSYBOX, "imagePullPolicy": "IfNotPresent"}],
        },
    }


def manifests(nodes_dir: pathlib.Path, nodes: list[str], provisioner_image: str) -> list[dict]:
    """Everything the provisioner needs, as API objects."""
    path_map = [{"node": node, "paths": [str(volumes_dir(nodes_dir, node))]} for node in nodes]
    labels = {"app.kubernetes.io/name": "local-path-provisioner"}
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": NAMESPACE,
                # Its helper pods mount host folders as root: the namespace is privileged.
                "labels": {"pod-security.kubernetes.io/enforce": "privileged"},
            },
        },
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "localkube:local-path-provisioner"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["nodes", "persistentvolumeclaims", "configmaps"],
                    "verbs": ["get", "list", "watch"],
                },
                {
                    "apiGroups": [""],
                    "resources": ["persistentvolumes", "pods", "pods/log", "endpoints"],
                    "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"],
                },
                {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
                {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": ["get", "list", "watch"]},
                {
                    "apiGroups": ["coordination.k8s.io"],
                    "resources": ["leases"],
                    "verbs": ["get", "list", "watch", "create", "update", "patch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "localkube:local-path-provisioner"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "localkube:local-path-provisioner",
            },
            "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}],
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": CONFIGMAP, "namespace": NAMESPACE},
            "data": {
                "config.json": json.dumps({"nodePathMap": path_map}, indent=2),
                "setup": SETUP_SCRIPT,
                "teardown": TEARDOWN_SCRIPT,
                "helperPod.yaml": json.dumps(_helper_pod(), indent=2),
            },
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "local-path-provisioner", "namespace": NAMESPACE},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": SERVICE_ACCOUNT,
                        # One replica: when its node stops, it moves within seconds rather than the
                        # default 300 s, or no volume could be made for a member's replacement.
                        "tolerations": [
                            {
                                "key": taint,
                                "operator": "Exists",
                                "effect": "NoExecute",
                                "tolerationSeconds": EVICTION_AFTER_SECONDS,
                            }
                            for taint in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
                        ],
                        "containers": [
                            {
                                "name": "provisioner",
                                "image": provisioner_image,
                                "imagePullPolicy": "IfNotPresent",
                                "command": [
                                    "local-path-provisioner",
                                    "start",
                                    "--config",
                                    "/etc/config/config.json",
                                    "--service-account-name",
                                    SERVICE_ACCOUNT,
                                    "--configmap-name",
                                    CONFIGMAP,
                                    "--provisioner-name",
                                    PROVISIONER,
                                    "--helper-image",
                                    image_names.BUSYBOX,
                                ],
                                "env": [
                                    {
                                        "name": "POD_NAMESPACE",
                                        "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                                    }
                                ],
                                "volumeMounts": [{"name": "config", "mountPath": "/etc/config"}],
                            }
                        ],
                        "volumes": [{"name": "config", "configMap": {"name": CONFIGMAP}}],
                    },
                },
            },
        },
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": STORAGE_CLASS, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": PROVISIONER,
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "WaitForFirstConsumer",
        },
    ]


def provisioner_image() -> str:
    version = image_recipes.pinned_version("local-path-provisioner", image_recipes.LOCAL_PATH_PROVISIONER_MODULE)
    if not version:
        raise RuntimeError("e2e/testbin/local-path-provisioner pins no version: no PVCs on real nodes")
    return image_names.local_path_provisioner(version)


def install(layout: Layout, nodes_dir: pathlib.Path, nodes: list[str], kubectl: str) -> None:
    """Applies the provisioner (harmless when applied already) and waits until it runs."""
    for node in nodes:
        volumes_dir(nodes_dir, node).mkdir(parents=True, exist_ok=True)
    document = {"apiVersion": "v1", "kind": "List", "items": manifests(nodes_dir, nodes, provisioner_image())}
    env_args = ["--kubeconfig", str(layout.kubeconfig)]
    subprocess.run(
        [kubectl, *env_args, "apply", "--server-side", "--force-conflicts", "--field-manager=localkube", "-f", "-"],
        input=json.dumps(document),
        text=True,
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [
            kubectl,
            *env_args,
            "-n",
            NAMESPACE,
            "rollout",
            "status",
            "deployment/local-path-provisioner",
            f"--timeout={READY_TIMEOUT}",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
