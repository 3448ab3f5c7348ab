"""EtcdRestore handlers: a daemon per restore that drives it once to the end."""

from __future__ import annotations

import logging

import kopf

from etcd_operator import API_GROUP, API_VERSION
from etcd_operator.handlers.common import event_poster, sleep_unless_changed, snapshot
from etcd_operator.restore.controller import RestoreController

ERROR_BACKOFF = 10.0


@kopf.daemon(API_GROUP, API_VERSION, "etcdrestores", cancellation_timeout=30.0)
async def run_restore(body: kopf.Body, stopped: kopf.DaemonStopped, memo: kopf.Memo,
                      logger: logging.Logger, **_) -> None:
    controller = RestoreController(memo.kube, memo.config.operator_image, event_poster(body))
    while not stopped:
        try:
            delay = await controller.reconcile(snapshot(body))
        except Exception as e:  # a failed pass is retried; the daemon lives on
            logger.exception("restore pass failed: %s", e)
            delay = ERROR_BACKOFF
        if delay is None:
            return
        await sleep_unless_changed(stopped, body, delay)
