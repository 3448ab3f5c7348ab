"""The e2e scenarios run against whatever KUBECONFIG points at, with the operator
installed from deploy/ and running as a pod under its ServiceAccount.

- `make test` (default): the local control plane; this conftest installs the operator
  with `kubectl apply -k e2e/deploy-local` (deploy/ watching e2e-* namespaces), and S3
  is the substrate's MinIO.
- `make e2e-kind` (E2E_TARGET=kind): the Makefile created the kind cluster, loaded the
  image, applied deploy/ and MinIO; S3 settings come from E2E_S3_* variables."""

from __future__ import annotations

import os
import pathlib

import pytest

from localkube import controlplane
from tests.support.kubectl import kubectl
from tests.support.waiting import wait_for

ROOT = pathlib.Path(__file__).resolve().parents[2]
ON_KIND = os.environ.get("E2E_TARGET") == "kind"


@pytest.fixture(scope="session")
def deployed_operator(request):
    if ON_KIND:
        return None
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
    if ON_KIND:
        return {k: os.environ[f"E2E_S3_{k.upper()}"] for k in ("endpoint", "bucket", "access_key", "secret_key")}
    substrate = request.getfixturevalue("substrate")
    env = controlplane.s3_environment(substrate)
    return {"endpoint": env["S3_ENDPOINT"], "bucket": env["S3_BUCKET"],
            "access_key": env["AWS_ACCESS_KEY_ID"], "secret_key": env["AWS_SECRET_ACCESS_KEY"]}
