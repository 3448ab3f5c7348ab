#!/usr/bin/env bash
# `make demo`: the main job on the local default. The control plane, MinIO and the node
# agent are up (make up); this runs the operator, applies a 3-member cluster, an hourly
# backup schedule and a first backup to MinIO, waits until all are healthy, and says
# what to try next.
set -euo pipefail
cd "$(dirname "$0")/.."
source .localkube/env
PY=.venv/bin/python
NS=demo

pidfile=.localkube/run/operator.pid
if ! { [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }; then
  HEALTH_PORT=$(PYTHONPATH=e2e $PY -c 'from localkube import layout; print(layout.current().ports.operator_health)')
  WATCH_NAMESPACES=$NS HEALTH_PORT=$HEALTH_PORT setsid $PY -m etcd_operator >>.localkube/logs/operator.log 2>&1 </dev/null &
  echo $! >"$pidfile"
  echo "operator started, watching namespace $NS (log: .localkube/logs/operator.log)"
fi

kubectl create namespace $NS --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl -n $NS create secret generic minio-credentials \
  --from-literal=accessKeyID="$AWS_ACCESS_KEY_ID" --from-literal=secretAccessKey="$AWS_SECRET_ACCESS_KEY" \
  --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl apply -n $NS -f examples/etcdcluster.yaml
for backup in "demo-backup|  schedule: \"0 * * * *\"
  retention:
    maxBackups: 24" "demo-first-backup|"; do
  name=${backup%%|*}
  kubectl apply -n $NS -f - <<YAML
apiVersion: etcd.operator.dev/v1alpha1
kind: EtcdBackup
metadata:
  name: $name
spec:
  clusterRef:
    name: demo
${backup#*|}
  storage:
    s3:
      bucket: $S3_BUCKET
      prefix: demo
      endpoint: $S3_ENDPOINT
      region: $S3_REGION
      forcePathStyle: true
      insecure: true  # the local MinIO speaks plain http
      credentialsSecretRef:
        name: minio-credentials
YAML
done

echo "waiting for the 3-member cluster to be Running ..."
kubectl wait -n $NS etcdcluster/demo --for=jsonpath='{.status.phase}'=Running --timeout=300s >/dev/null
kubectl wait -n $NS etcdcluster/demo --for=jsonpath='{.status.readyMembers}'=3 --timeout=300s >/dev/null
echo "waiting for the first backup ..."
kubectl wait -n $NS etcdbackup/demo-first-backup --for=jsonpath='{.status.phase}'=Completed --timeout=300s >/dev/null
kubectl wait -n $NS etcdbackup/demo-backup --for=jsonpath='{.status.phase}'=Scheduled --timeout=120s >/dev/null
kubectl get -n $NS etcdclusters,etcdbackups
echo
echo "first backup in MinIO: s3://$S3_BUCKET/$(kubectl get -n $NS etcdbackup demo-first-backup -o jsonpath='{.status.lastBackup.key}')"
cat <<MSG

The local default is up: a healthy 3-member etcd cluster and its backups. Try:
  source .localkube/env
  kubectl get etcdcluster demo -n $NS -o yaml          # members, leader, conditions
  kubectl scale etcdcluster demo -n $NS --replicas=5   # grows one learner at a time
  kubectl get events -n $NS --sort-by=.lastTimestamp
  PATH=\$PWD/.venv/bin:\$PATH kubectl etcd status demo -n $NS   # the plugin: lag, db size, alarms
  PATH=\$PWD/.venv/bin:\$PATH kubectl etcd backups demo-first-backup -n $NS
  etcdctl --endpoints=\$(kubectl get pod demo-0 -n $NS -o jsonpath='{.status.podIP}'):2379 put hello world
  sed s/demo-backup/demo-first-backup/ examples/restore-new-cluster.yaml | kubectl apply -n $NS -f -
                                                       # restore the first backup into a new cluster
  make down                                            # stops everything
MSG
