"""The operator as users install it on the session's real nodes: the Helm chart with its
default values (every namespace watched, two replicas) into the namespace `etcd-operator`,
labelled for restricted Pod Security. The `operator_release` fixture installs it once per
session; the journeys that need the name free (README's quickstart) or reinstall it (helm)
take it away and put it back with these functions. A test that needs an operator with settings
of its own installs a second release as a shard (`shard_release`) beside it."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import tempfile

from tests.support import claims
from tests.support.helm import CHART, helm
from tests.support.kubectl import kubectl, kubectl_json
from tests.support.waiting import wait_for

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
    """The namespace, labelled restricted; one of this name still terminating (deleted without
    waiting, delete_namespace(wait=False)) goes first."""
    phase = kubectl("get", "namespace", name, "-o", "jsonpath={.status.phase}", check=False).stdout
    if phase == "Terminating":
        kubectl("wait", "--for=delete", f"namespace/{name}", "--timeout=120s", check=False)
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}},
    }
    kubectl("apply", "-f", "-", input=json.dumps(namespace))


RELEASE_USER = f"system:serviceaccount:{NAMESPACE}:{RELEASE}"
FENCE_MESSAGE = "the session's chart release is fenced out of this namespace"


def _fence(name: str, namespace: str) -> list[dict]:
    """A ValidatingAdmissionPolicy refusing every write of the release's user to the
    EtcdClusters of `namespace`, and its binding."""
    group = "admissionregistration.k8s.io/v1"
    policy = {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "resourceRules": [
                {
                    "apiGroups": ["etcd.operator.dev"],
                    "apiVersions": ["*"],
                    "operations": ["CREATE", "UPDATE", "DELETE"],
                    "resources": ["etcdclusters", "etcdclusters/status"],
                }
            ],
        },
        "matchConditions": [{"name": "the-release", "expression": f"request.userInfo.username == '{RELEASE_USER}'"}],
        "validations": [{"expression": "false", "message": FENCE_MESSAGE}],
    }
    return [
        {"apiVersion": group, "kind": "ValidatingAdmissionPolicy", "metadata": {"name": name}, "spec": policy},
        {
            "apiVersion": group,
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"]},
        },
    ]


def _fence_in_force(namespace: str, answers: list[str]) -> bool:
    probe = {
        "apiVersion": "etcd.operator.dev/v1alpha1",
        "kind": "EtcdCluster",
        "metadata": {"name": "fence-probe", "namespace": namespace},
        "spec": {"size": 1},
    }
    result = kubectl(
        "create",
        "--dry-run=server",
        f"--as={RELEASE_USER}",
        "--as-group=system:masters",
        "-f",
        "-",
        input=json.dumps(probe),
        check=False,
    )
    answers[:] = [f"exit {result.returncode}: {result.stderr.strip()}"]
    return result.returncode != 0 and FENCE_MESSAGE in result.stderr


@contextlib.contextmanager
def fenced_out(namespace: str):
    """While the block runs, the session's release (unsharded: it takes every EtcdCluster that
    no other instance holds) can write no EtcdCluster of `namespace`: for a test whose own
    operators leave a cluster without an owner for a moment, as a hand-over between shards does."""
    name = f"release-fenced-out-{namespace}"
    kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": _fence(name, namespace)})
    )
    try:
        answers: list[str] = []
        try:
            wait_for(lambda: _fence_in_force(namespace, answers), 30, interval=0.5, what="the release fenced out")
        except TimeoutError as timed_out:
            raise TimeoutError(f"{timed_out}; the probe's last answer: {answers}") from None
        yield
    finally:
        kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", name, "--ignore-not-found")


def delete_namespace(name: str, wait: bool = True) -> None:
    """Waits until the namespace is gone (up to 120 s), so that it can be created again; with
    `wait=False` it goes meanwhile (Kubernetes deletes the pods first, and everything else only
    after their grace period, 30 s for members), and restricted_namespace waits for it."""
    if not wait:
        kubectl("delete", "namespace", name, "--ignore-not-found", "--wait=false", check=False)
        return
    kubectl("delete", "namespace", name, "--ignore-not-found", "--timeout=120s", check=False)


def install(kubeconfig: os.PathLike | str) -> None:
    """The CRDs applied from crds/ first, as tests/support/crds.py may have done already; the
    release then takes them over (`--take-ownership`: they carry no Helm owner, or another
    release's, such as a journey's), as docs/operations/upgrading-the-operator.md tells users.
    On nodes kept from an earlier run whose release installed older CRDs, Helm owns their
    fields: the apply takes them over (--force-conflicts), and the release takes them back."""
    with kubeconfig_env(kubeconfig):
        kubectl("apply", "--server-side", "--force-conflicts", "-k", str(ROOT / "crds"))
        kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        restricted_namespace(NAMESPACE)
        helm(
            "install",
            RELEASE,
            str(CHART),
            "-n",
            NAMESPACE,
            "--kubeconfig",
            str(kubeconfig),
            "--take-ownership",
            "--wait",
            "--timeout",
            "180s",
        )


def installed(kubeconfig: os.PathLike | str) -> bool:
    with kubeconfig_env(kubeconfig):
        return helm("status", RELEASE, "-n", NAMESPACE, "--kubeconfig", str(kubeconfig), check=False).returncode == 0


def uninstall(kubeconfig: os.PathLike | str) -> None:
    with kubeconfig_env(kubeconfig):
        helm("uninstall", RELEASE, "-n", NAMESPACE, "--kubeconfig", str(kubeconfig), "--wait", check=False)
        delete_namespace(NAMESPACE)


def replicas(release: str = RELEASE, namespace: str = NAMESPACE) -> int:
    return kubectl_json("get", f"deployment/{release}", "-n", namespace)["spec"]["replicas"]


def scale(replicas: int, release: str = RELEASE, namespace: str = NAMESPACE) -> None:
    """Scales the release's Deployment and waits: rolled out, or every operator pod gone."""
    kubectl("scale", f"deployment/{release}", "-n", namespace, f"--replicas={replicas}")
    if replicas:
        kubectl("rollout", "status", f"deployment/{release}", "-n", namespace, "--timeout=180s")
    else:
        wait_for(
            lambda: (
                not kubectl(
                    "get", "pods", "-n", namespace, "-o", "name", "-l", f"app.kubernetes.io/name={CHART.name}"
                ).stdout.strip()
            ),
            120,
            what="the operator's pods gone",
        )


def release_logs(release: str = RELEASE, namespace: str = NAMESPACE) -> str:
    """The whole logs of a release's operator pods, one after the other."""
    return kubectl("logs", "-n", namespace, "-l", f"app.kubernetes.io/instance={release}", "--tail=-1").stdout


@dataclasses.dataclass(frozen=True)
class ShardRelease:
    """A second release of the chart that works only on the objects it claims."""

    name: str

    def claim(self, manifest: dict) -> dict:
        """The manifest held by this release from its creation on (tests/support/claims.py)."""
        return claims.claim(manifest, self.name)

    def logs(self) -> str:
        """The log of the release's one operator pod (the container's whole log)."""
        return release_logs(self.name, self.name)


@contextlib.contextmanager
def shard_release(
    kubeconfig: os.PathLike | str, name: str, namespaces: list[str], env: dict[str, str], values: dict | None = None
):
    """The chart installed once more, as release and namespace `name`: one replica, shard
    `name` selecting `claims.SHARD_LABEL=name`, watching `namespaces`, with `env` added to the
    operator's and `values` over the chart's; the CRDs stay the session release's. On the way
    out the objects it holds there are deleted (it removes its finalizers) before it is
    uninstalled."""
    values = {
        "replicas": 1,
        "watchNamespaces": namespaces,
        "shard": {"name": name, "selector": claims.shard_env(name)["SHARD_SELECTOR"]},
        "extraEnv": [{"name": k, "value": v} for k, v in env.items()],
        "crds": {"install": False},
        **(values or {}),
    }
    with kubeconfig_env(kubeconfig), tempfile.NamedTemporaryFile("w", suffix=".json") as file:
        json.dump(values, file)
        file.flush()
        restricted_namespace(name)
        try:
            helm(
                "install",
                name,
                str(CHART),
                "-n",
                name,
                "--kubeconfig",
                str(kubeconfig),
                "-f",
                file.name,
                "--wait",
                "--timeout",
                "180s",
            )
            yield ShardRelease(name)
        finally:
            for namespace in namespaces:
                kubectl(
                    "delete",
                    "etcdrestores,etcdbackups,etcdclusters",
                    "--all",
                    "-n",
                    namespace,
                    "--timeout=120s",
                    check=False,
                )
            helm("uninstall", name, "-n", name, "--kubeconfig", str(kubeconfig), "--wait", check=False)
            delete_namespace(name)
