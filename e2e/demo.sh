#!/usr/bin/env bash
# `make demo`: the main job on the local default. The control plane, MinIO and three real
# nodes are up (make up); the chart installs the operator as pods from the image built here,
# then this applies the demo's one manifest (e2e/demo/demo.yaml: a namespace, S3 credentials, a
# 3-member TLS cluster, an hourly backup schedule and a first backup) at once, waits until all
# are healthy, writes and reads a key with the commands it prints, and says what to try next.
# Running it again changes nothing.
set -Eeuo pipefail  # -E: the ERR trap below fires inside functions too
cd "$(dirname "$0")/.."
STATE=${LOCALKUBE_STATE_DIR:-.localkube}  # the substrate's state (tests point it at theirs)
source "$STATE/env"
PY=.venv/bin/python
NS=${DEMO_NAMESPACE:-demo}

helm() { HELM_CACHE_HOME=$PWD/.helm/cache HELM_CONFIG_HOME=$PWD/.helm/config HELM_DATA_HOME=$PWD/.helm/data \
  "$ETCD_OPERATOR_TESTBIN/helm/helm" "$@"; }
if ! helm status etcd-operator -n etcd-operator >/dev/null 2>&1; then
  kubectl apply -f - >/dev/null <<'YAML'
{"apiVersion": "v1", "kind": "Namespace",
 "metadata": {"name": "etcd-operator", "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
YAML
  # --take-ownership: `make crds` applied the CRDs before; the release takes them over.
  helm install etcd-operator charts/etcd-operator -n etcd-operator --set "watchNamespaces={$NS}" \
    --take-ownership --wait --timeout 180s >/dev/null
  echo "operator installed by the chart: two pods in namespace etcd-operator, watching namespace $NS" \
    "(logs: kubectl logs -n etcd-operator deployment/etcd-operator)"
fi

# On a failure, what a user would look at next: the resources' conditions, the pods and the
# nodes they ran on, the namespace's events and the operator's last log lines.
explain_failure() {
  trap - ERR
  echo "demo: failed; what the substrate shows:" >&2
  {
    kubectl get nodes -o wide
    getent hosts demo-client.$NS.svc || echo "demo-client.$NS.svc does not resolve on this host" \
      "(/etc/resolv.conf: $(grep -m1 nameserver /etc/resolv.conf); only one checkout's real nodes serve the host)"
    kubectl get -n $NS etcdclusters,etcdbackups -o yaml | sed -n '/^  status:/,/^- apiVersion/p'
    kubectl get -n $NS pods,pvc -o wide
    kubectl get events -n $NS --sort-by=.lastTimestamp | tail -n 40
    kubectl logs -n etcd-operator -l app.kubernetes.io/name=etcd-operator --prefix --tail=60
  } >&2 2>&1 || true
}
trap explain_failure ERR

export ACCESS_KEY_ID_BASE64=$(printf %s "$AWS_ACCESS_KEY_ID" | base64 -w0)
export SECRET_ACCESS_KEY_BASE64=$(printf %s "$AWS_SECRET_ACCESS_KEY" | base64 -w0)
NAMESPACE=$NS $PY -c 'import os, string, sys; print(string.Template(sys.stdin.read()).substitute(os.environ))' \
  <e2e/demo/demo.yaml | kubectl apply -f -

echo "waiting for the 3-member cluster to be Available ..."
kubectl wait -n $NS etcdcluster/demo --for=condition=Available --timeout=300s >/dev/null
kubectl wait -n $NS etcdcluster/demo --for=jsonpath='{.status.readyMembers}'=3 --timeout=300s >/dev/null
kubectl wait -n $NS etcdcluster/demo --for=condition=Ready --timeout=300s >/dev/null
echo "waiting for the first backup ..."
kubectl wait -n $NS etcdbackup/demo-first-backup --for=jsonpath='{.status.phase}'=Completed --timeout=300s >/dev/null
kubectl wait -n $NS etcdbackup/demo-first-backup --for=condition=Ready --timeout=60s >/dev/null
kubectl wait -n $NS etcdbackup/demo-backup --for=jsonpath='{.status.phase}'=Scheduled --timeout=120s >/dev/null
kubectl get -n $NS etcdclusters,etcdbackups
echo
echo "first backup in MinIO: s3://$S3_BUCKET/$(kubectl get -n $NS etcdbackup demo-first-backup -o jsonpath='{.status.lastBackup.key}')"

# The client certificate hint, run here exactly as printed below.
certs=$STATE/demo-client-tls
mkdir -p $certs
for f in ca.crt tls.crt tls.key; do
  kubectl get secret demo-client-tls -n $NS -o "jsonpath={.data.${f/./\\.}}" | base64 -d >"$certs/$f"
done
etcdctl() { command etcdctl --endpoints=https://demo-client.$NS.svc:2379 \
  --cacert=$certs/ca.crt --cert=$certs/tls.crt --key=$certs/tls.key "$@"; }
# After `make down` and `make up`, status may still say Available while the members' pods
# start again and their names come back into DNS: the first write is retried for up to a minute.
for _ in $(seq 30); do
  etcdctl --command-timeout=2s put hello world >/dev/null 2>&1 && break
  sleep 2
done
etcdctl put hello world >/dev/null
[[ "$(etcdctl get hello --print-value-only)" == world ]] || { echo "demo: reading hello back failed" >&2; exit 1; }

cat <<MSG

The local default is up: a healthy 3-member etcd cluster (TLS on) and its backups. Try:
  source $STATE/env
  kubectl get etcdcluster demo -n $NS -o yaml          # members, leader, conditions
  kubectl scale etcdcluster demo -n $NS --replicas=5   # grows one learner at a time
  kubectl get events -n $NS --sort-by=.lastTimestamp
  PATH=\$PWD/.venv/bin:\$PATH kubectl etcd status demo -n $NS   # the plugin: lag, db size, alarms
  PATH=\$PWD/.venv/bin:\$PATH kubectl etcd backups demo-first-backup -n $NS
  # etcdctl with the client certificate of Secret demo-client-tls (written to $certs):
  etcdctl --endpoints=https://demo-client.$NS.svc:2379 --cacert=$certs/ca.crt \\
    --cert=$certs/tls.crt --key=$certs/tls.key get hello
  sed s/demo-backup/demo-first-backup/ examples/restore-new-cluster.yaml | kubectl apply -n $NS -f -
                                                       # restore the first backup into a new cluster
  make down                                            # stops everything
MSG
