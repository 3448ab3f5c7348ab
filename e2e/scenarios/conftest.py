"""The e2e scenarios run against whatever KUBECONFIG points at, with the operator
installed from deploy/ and running as a pod under its ServiceAccount.

- E2E_TARGET=external: whatever KUBECONFIG points at, with the operator already installed
  (watching e2e-* namespaces) and S3 settings from E2E_S3_ENDPOINT, E2E_S3_BUCKET,
  E2E_S3_ACCESS_KEY and E2E_S3_SECRET_KEY. Nothing local is started. `make test` runs
  this mode against the local substrate (tests/substrate/test_helm_release.py installs
  the chart, then runs these scenarios in a separate pytest process); `make e2e-kind`
  runs it against kind.
- unset (a developer running this folder directly): the local control plane; this
  conftest installs the operator with `kubectl apply -k e2e/deploy-local` (deploy/
  watching e2e-* namespaces), and S3 is the substrate's MinIO."""

from __future__ import annotations

import os
import pathlib

import pytest

from localkube import controlplane
from tests.support.kubectl import kubectl
from tests.support.waiting import wait_for

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXTERNAL = os.environ.get("E2E_TARGET") in ("external", "kind")


@pytest.fixture(scope="session")
def deployed_operator(request):
    if EXTERNAL:  # installed by whoever set E2E_TARGET
        yield os.environ.get("E2E_OPERATOR_NAMESPACE", "etcd-operator")
        return
    request.getfixturevalue("substrate")
    kubectl("apply", "--server-side", "--force-conflicts", "-k", str(ROOT / "e2e" / "deploy-local"))
    kubectl("rollout", "status", "deployment/etcd-operator", "-n", "etcd-operator", "--timeout=180s")
    wait_for(lambda: kubectl("get", "lease", "etcd-operator-leader", "-n", "etcd-operator",
                             "-o", "jsonpath={.spec.holderIdentity}", check=False).stdout.strip(),
             120, what="a leader elected")
    yield "etcd-operator"
    # The operator goes; the CRDs stay (deleting them would wait on every object's finalizer).
    kubectl("delete", "clusterrolebinding,clusterrole", "etcd-operator", "--ignore-not-found", check=False)
    kubectl("delete", "namespace", "etcd-operator", "--ignore-not-found", "--wait=true", "--timeout=100s",
            check=False)


@pytest.fixture(scope="session")
def s3_settings(request) -> dict:
    if EXTERNAL:
        return {k: os.environ[f"E2E_S3_{k.upper()}"] for k in ("endpoint", "bucket", "access_key", "secret_key")}
    substrate = request.getfixturevalue("substrate")
    env = controlplane.s3_environment(substrate)
    return {"endpoint": env["S3_ENDPOINT"], "bucket": env["S3_BUCKET"],
            "access_key": env["AWS_ACCESS_KEY_ID"], "secret_key": env["AWS_SECRET_ACCESS_KEY"]}
