"""EtcdBackup handlers: a daemon per backup that runs it once or on its schedule."""

from __future__ import annotations

import logging

import kopf

from etcd_operator import API_GROUP, API_VERSION
from etcd_operator.backup.controller import BackupController
from etcd_operator.handlers.common import event_poster, sleep_unless_changed, snapshot

ERROR_BACKOFF = 30.0


@kopf.daemon(API_GROUP, API_VERSION, "etcdbackups", cancellation_timeout=30.0)
async def run_backup(body: kopf.Body, stopped: kopf.DaemonStopped, memo: kopf.Memo,
                     logger: logging.Logger, **_) -> None:
    controller = BackupController(memo.kube, memo.backup_locks, event_poster(body))
    while not stopped:
        try:
            delay = await controller.reconcile(snapshot(body))
        except Exception as e:  # a failed pass is retried; the daemon lives on
            logger.exception("backup pass failed: %s", e)
            delay = ERROR_BACKOFF
        if delay is None:
            return
        await sleep_unless_changed(stopped, body, delay)
