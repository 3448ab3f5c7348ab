"""kopf settings shared by every handler; registered on import."""

from __future__ import annotations

import logging

import kopf

from etcd_operator import API_GROUP
from etcd_operator.clients.kube.client import KubeClient
from etcd_operator.clients.kube.informer import ChildCaches
from etcd_operator.controllers.backup.continuous_streams import ContinuousStreams
from etcd_operator.controllers.cluster.observer import StorageClassExpansion
from etcd_operator.core import buffer_budget, shard
from etcd_operator.runtime.config import OperatorConfig

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
    settings.posting.loggers = False  # kopf would post ERROR log lines as events of type "Error"
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 10
    settings.networking.request_timeout = 30
    settings.execution.max_workers = 8
    settings.scanning.disabled = memo.config.names_only  # see OperatorConfig.names_only
    buffer_budget.configure(memo.config.memory_budget_bytes)  # before any backup can resume
    memo.kube = await KubeClient.from_environment()
    memo.backup_locks = {}
    memo.continuous_streams = ContinuousStreams()  # the continuous backups' writers
    memo.storage_classes = StorageClassExpansion(memo.kube, ttl=memo.config.resync_seconds)
    memo.children = None
    if memo.config.watch_children:  # one pod and one PVC watch for every cluster of this operator
        memo.children = ChildCaches(memo.kube, memo.config.namespaces)
        memo.children.start()


@kopf.on.cleanup()
async def close_clients(memo: kopf.Memo, **_) -> None:
    if getattr(memo, "continuous_streams", None) is not None:
        await memo.continuous_streams.stop_all()
    if getattr(memo, "children", None) is not None:
        await memo.children.stop()
    if getattr(memo, "kube", None) is not None:
        await memo.kube.close()


import etcd_operator.handlers  # noqa: E402,F401  registers the resource handlers
