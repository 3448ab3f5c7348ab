"""The shard filters of the resource handlers (etcd_operator/core/shard.py), and the hand-over
request a shard makes for a cluster another instance still holds.

kopf evaluates the filters on every event. A daemon runs only while its object is in this
shard (`in_shard`): it is stopped when the object leaves. The cluster deletion handler keeps
this shard's finalizer on a cluster for as long as the shard holds it (`held_by_shard`), so
a cluster that left every shard still has its reclaimPolicy applied when it is deleted."""

from __future__ import annotations

import collections
import logging
from collections.abc import Mapping
from typing import Any

import kopf

from etcd_operator import API_GROUP, API_VERSION
from etcd_operator.core.shard import HANDOVER_ANNOTATION
from etcd_operator.handlers.common import object_ref

logger = logging.getLogger(__name__)
# Objects this instance was told about once as held by another instance: uid -> claims.
# Only a log line's repetition depends on it, so the oldest entries are dropped past a bound
# (an object deleted while held is never seen unclaimed).
_waiting: collections.OrderedDict[str, tuple[str, ...]] = collections.OrderedDict()
WAITING_REMEMBERED = 4096


def in_shard(
    labels: Mapping[str, str], meta: Mapping[str, Any], memo: Any, body: Mapping[str, Any] | None = None, **_: Any
) -> bool:
    shard = memo.config.shard
    if not shard.selector.matches(labels):
        return False
    claims = tuple(shard.foreign_claims(meta.get("finalizers")))
    uid = meta.get("uid", "")
    if not claims:
        _waiting.pop(uid, None)
        return True
    if _waiting.get(uid) != claims:  # said once per object and holder, not on every event
        _waiting[uid] = claims
        _waiting.move_to_end(uid)
        while len(_waiting) > WAITING_REMEMBERED:
            _waiting.popitem(last=False)
        logger.info(
            "%s/%s matches this shard's selector but is held by %s; waiting until that instance releases it",
            meta.get("namespace"),
            meta.get("name"),
            ", ".join(claims),
            extra={"k8s_ref": object_ref(body if body is not None else {"metadata": meta})},
        )
    return False


def held_by_shard(
    labels: Mapping[str, str], meta: Mapping[str, Any], annotations: Mapping[str, str], memo: Any, **_: Any
) -> bool:
    return memo.config.shard.holds(labels, meta.get("finalizers"), annotations)


def wants_handover(
    labels: Mapping[str, str], meta: Mapping[str, Any], annotations: Mapping[str, str], memo: Any, **_: Any
) -> bool:
    return memo.config.shard.wants_handover(labels, meta.get("finalizers"), annotations)


@kopf.on.event(API_GROUP, API_VERSION, "etcdclusters", when=wants_handover)
async def request_handover(patch: kopf.Patch, meta: kopf.Meta, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    """Asks the instance holding a cluster of this shard's selector to let it go; that
    instance does once the cluster no longer matches its own selector."""
    name = memo.config.shard.name
    logger.info("%s/%s: asking its holder to hand it over to shard %s", meta.get("namespace"), meta.get("name"), name)
    patch.meta.annotations[HANDOVER_ANNOTATION] = name
