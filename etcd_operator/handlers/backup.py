"""EtcdBackup handlers: a daemon per backup that runs it once or on its schedule."""

from __future__ import annotations

import logging
from typing import Any, Mapping

import kopf

from etcd_operator import API_GROUP, API_VERSION
from etcd_operator.backup.controller import BackupController
from etcd_operator.handlers.common import event_poster, run_until_deleted

ERROR_BACKOFF = 30.0


def _changed_since(seen: Mapping[str, Any], body: kopf.Body) -> bool:
    meta = body.get("metadata", {})
    return (meta.get("generation") != seen.get("generation")
            or dict(meta.get("annotations") or {}) != dict(seen.get("annotations") or {}))


@kopf.daemon(API_GROUP, API_VERSION, "etcdbackups", cancellation_timeout=30.0)
async def run_backup(body: kopf.Body, stopped: kopf.DaemonStopped, memo: kopf.Memo,
                     logger: logging.Logger, **_) -> None:
    controller = BackupController(memo.kube, memo.backup_locks, event_poster(body))

    async def one_pass(snapshot: Mapping[str, Any]) -> float | None:
        delay = await controller.reconcile(snapshot)
        # An edit that arrived during the pass must not be taken as the baseline of an
        # idle wait (a schedule fixed while the broken one was being reported).
        if delay is None and _changed_since(snapshot.get("metadata", {}), body):
            return 0.0
        return delay

    await run_until_deleted(one_pass, body, stopped, logger, ERROR_BACKOFF)
