"""kopf settings shared by every handler; registered on import."""

from __future__ import annotations

import logging

import kopf

from etcd_operator import API_GROUP, membudget, shard
from etcd_operator.config import OperatorConfig
from etcd_operator.kube.client import KubeClient

FINALIZER = shard.FINALIZER  # of an unsharded instance; a shard's is `config.shard.finalizer`


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_) -> None:
    memo.config = OperatorConfig.from_env()
    settings.persistence.finalizer = memo.config.shard.finalizer  # also the shard's claim on an object
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=API_GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=API_GROUP, key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 10
    settings.networking.request_timeout = 30
    settings.execution.max_workers = 8
    membudget.configure(memo.config.memory_budget_bytes)  # before any backup can resume
    memo.kube = await KubeClient.from_environment()
    memo.backup_locks = {}


@kopf.on.cleanup()
async def close_clients(memo: kopf.Memo, **_) -> None:
    if getattr(memo, "kube", None) is not None:
        await memo.kube.close()


import etcd_operator.handlers  # noqa: E402,F401  registers the resource handlers
