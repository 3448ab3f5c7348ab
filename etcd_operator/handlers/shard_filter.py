"""The `when=` filter of every resource handler: this instance works only on the objects of
its shard (etcd_operator/shard.py). kopf evaluates it on every event, so an object whose
labels leave the shard has its daemon stopped and this shard's finalizer removed, and an
object another instance holds is left alone until that instance lets it go."""

from __future__ import annotations

import logging
from typing import Any, Mapping

logger = logging.getLogger(__name__)
# Objects this instance was told about once as held by another instance: uid -> claims.
_waiting: dict[str, tuple[str, ...]] = {}


def in_shard(labels: Mapping[str, str], meta: Mapping[str, Any], memo: Any, **_: Any) -> bool:
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
        logger.info("%s/%s matches this shard's selector but is held by %s; waiting until that instance "
                    "releases it", meta.get("namespace"), meta.get("name"), ", ".join(claims))
    return False
