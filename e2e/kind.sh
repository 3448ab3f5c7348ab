#!/usr/bin/env bash
# `make e2e-kind`: the e2e scenarios on a kind cluster (needs Docker and kind; these
# development machines have no Docker engine, so it runs elsewhere).
set -euo pipefail
cd "$(dirname "$0")/.."
CLUSTER=etcd-operator-e2e
IMAGE=ghcr.io/etcd-operator/etcd-operator:0.1.0
ARTIFACTS=${ARTIFACTS:-artifacts/e2e-kind}
mkdir -p "$ARTIFACTS"

cleanup() {
  status=$?
  if [[ $status -ne 0 ]]; then
    echo "e2e failed; collecting logs and events into $ARTIFACTS" >&2
    kubectl get events -A --sort-by=.lastTimestamp >"$ARTIFACTS/events.txt" 2>&1 || true
    kubectl logs -n etcd-operator deploy/etcd-operator --all-containers --prefix >"$ARTIFACTS/operator.log" 2>&1 || true
    kind export logs "$ARTIFACTS/kind" --name "$CLUSTER" >/dev/null 2>&1 || true
  fi
  kind delete cluster --name "$CLUSTER" || true
  exit $status
}
trap cleanup EXIT

# The node image runs the Kubernetes release testbin builds; kind (v0.30.0 or later) builds
# it once from that release's official server tarball.
KUBE_VERSION=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' e2e/testbin/kube/go.mod)
NODE_IMAGE="kindest/node:${KUBE_VERSION}-etcd-operator"
if ! docker image inspect "$NODE_IMAGE" >/dev/null 2>&1; then
  kind build node-image --type release "$KUBE_VERSION" --image "$NODE_IMAGE"
fi
kind create cluster --config e2e/kind.yaml --image "$NODE_IMAGE" --wait 120s
docker build -t "$IMAGE" .
kind load docker-image "$IMAGE" --name "$CLUSTER"
kubectl apply --server-side -k e2e/deploy-local
kubectl rollout status -n etcd-operator deployment/etcd-operator --timeout=180s
kubectl apply -f e2e/kind/minio.yaml
kubectl wait -n minio --for=condition=complete job/create-bucket --timeout=300s

export E2E_TARGET=external E2E_OPERATOR_NAMESPACE=etcd-operator
export E2E_S3_ENDPOINT=http://minio.minio.svc:9000 E2E_S3_BUCKET=etcd-backups
export E2E_S3_ACCESS_KEY=e2e-access-key E2E_S3_SECRET_KEY=e2e-secret-key-not-for-production
.venv/bin/python -m pytest e2e/scenarios -v
