"""EtcdBackup handlers: a daemon per backup that runs it once or on its schedule."""

from __future__ import annotations

import kopf

from etcd_operator import API_GROUP, API_VERSION
from etcd_operator.controllers import metrics
from etcd_operator.controllers.backup.reconciler import BackupReconciler
from etcd_operator.handlers.common import event_poster, run_until_deleted
from etcd_operator.handlers.sharding import in_shard

ERROR_BACKOFF = 30.0


@kopf.daemon(API_GROUP, API_VERSION, "etcdbackups", cancellation_timeout=30.0, when=in_shard)
async def run_backup(body: kopf.Body, stopped: kopf.DaemonStopped, memo: kopf.Memo, logger: kopf.Logger, **_) -> None:
    reconciler = BackupReconciler(
        memo.kube,
        memo.backup_locks,
        event_poster(body),
        memo.config.operator_image,
        memo.config.shard,
        memo.config.storage_policy,
        memo.continuous_streams,
    )
    meta = body["metadata"]
    try:
        await run_until_deleted(reconciler, body, stopped, logger, ERROR_BACKOFF)
    finally:
        await memo.continuous_streams.stop((meta["namespace"], meta["name"]))
        metrics.forget_backup(meta["namespace"], meta["name"])
