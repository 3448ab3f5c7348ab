#!/usr/bin/env bash
# `make demo`: the operator on the local default, with an example cluster applied.
set -euo pipefail
cd "$(dirname "$0")/.."
source .localkube/env
PY=.venv/bin/python
pidfile=.localkube/run/operator.pid
if ! { [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }; then
  HEALTH_PORT=$(PYTHONPATH=e2e $PY -c 'from localkube import layout; print(layout.current().ports.operator_health)') \
    setsid $PY -m etcd_operator >>.localkube/logs/operator.log 2>&1 </dev/null &
  echo $! >"$pidfile"
  echo "operator started (log: .localkube/logs/operator.log)"
fi
kubectl create namespace demo --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl apply -n demo -f examples/etcdcluster.yaml
cat <<MSG

The local default is up. Try:
  source .localkube/env
  kubectl get etcdclusters -n demo
  kubectl get pods -n demo -o wide
  make down        # stops everything, including the operator
MSG
