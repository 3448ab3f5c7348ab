"""EtcdRestore handlers: a daemon per restore that drives it once to the end, and a
deletion handler that takes its hold off a target it has not touched yet."""

from __future__ import annotations

import kopf

from etcd_operator import API_GROUP, API_VERSION
from etcd_operator.controllers import metrics
from etcd_operator.controllers.restore.reconciler import RestoreReconciler
from etcd_operator.handlers.common import event_poster, logging_about, run_until_deleted
from etcd_operator.handlers.sharding import in_shard

ERROR_BACKOFF = 10.0


@kopf.daemon(API_GROUP, API_VERSION, "etcdrestores", cancellation_timeout=30.0, when=in_shard)
async def run_restore(body: kopf.Body, stopped: kopf.DaemonStopped, memo: kopf.Memo, logger: kopf.Logger, **_) -> None:
    reconciler = RestoreReconciler(
        memo.kube, memo.config.operator_image, event_poster(body), memo.config.shard, memo.config.storage_policy
    )
    meta = body["metadata"]
    try:
        await run_until_deleted(reconciler, body, stopped, logger, ERROR_BACKOFF)
    finally:
        metrics.forget_restore(meta["namespace"], meta["name"])


@kopf.on.delete(API_GROUP, API_VERSION, "etcdrestores", when=in_shard)
async def restore_deleted(body: kopf.Body, memo: kopf.Memo, **_) -> None:
    reconciler = RestoreReconciler(memo.kube, memo.config.operator_image, event_poster(body), memo.config.shard)
    with logging_about(body):
        released = await reconciler.release_on_deletion(body)
    if not released:
        raise kopf.TemporaryError("the target changed meanwhile; looking again", delay=1)
