"""The operator as users install it on the session's real nodes: the Helm chart with its
default values (every namespace watched, two replicas) into the namespace `etcd-operator`,
labelled for restricted Pod Security. The `operator_release` fixture installs it once per
session; the journeys that need the name free (README's quickstart) or reinstall it (helm)
take it away and put it back with these functions."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib

from tests.support.helm import CHART, helm
from tests.support.kubectl import kubectl

ROOT = pathlib.Path(__file__).resolve().parents[2]
RELEASE = "etcd-operator"
NAMESPACE = "etcd-operator"


@contextlib.contextmanager
def kubeconfig_env(kubeconfig: os.PathLike | str):
    """tests.support's kubectl and helm follow KUBECONFIG: point it at one cluster for a while."""
    before = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(kubeconfig)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = before


def restricted_namespace(name: str) -> None:
    namespace = {"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": name, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
    kubectl("apply", "-f", "-", input=json.dumps(namespace))


def delete_namespace(name: str) -> None:
    """Waits until the namespace is gone (up to 120 s), so that it can be created again."""
    kubectl("delete", "namespace", name, "--ignore-not-found", "--timeout=120s", check=False)


def install(kubeconfig: os.PathLike | str) -> None:
    with kubeconfig_env(kubeconfig):
        kubectl("apply", "--server-side", "-k", str(ROOT / "crds"))
        kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        restricted_namespace(NAMESPACE)
        helm("install", RELEASE, str(CHART), "-n", NAMESPACE, "--kubeconfig", str(kubeconfig),
             "--wait", "--timeout", "180s")


def installed(kubeconfig: os.PathLike | str) -> bool:
    with kubeconfig_env(kubeconfig):
        return helm("status", RELEASE, "-n", NAMESPACE, "--kubeconfig", str(kubeconfig), check=False).returncode == 0


def uninstall(kubeconfig: os.PathLike | str) -> None:
    with kubeconfig_env(kubeconfig):
        helm("uninstall", RELEASE, "-n", NAMESPACE, "--kubeconfig", str(kubeconfig), "--wait", check=False)
        delete_namespace(NAMESPACE)
