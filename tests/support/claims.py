"""Custom resources created for an operator instance that is a shard of its own: the shard's
label and finalizer set from their creation on (etcd_operator/core/shard.py), so that an unsharded
instance on the same cluster (the session's chart release on the real nodes) leaves them alone
and no moment exists in which both could take one. The test helpers that create EtcdClusters,
EtcdBackups and EtcdRestores pass their manifests through `claimed`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from etcd_operator.core.shard import Shard, shard_from_settings

SHARD_LABEL = "etcd.operator.dev/test-shard"
# The shard of the operator processes the tests run on the host beside the chart's release.
HOST_OPERATOR_SHARD = "host-operator"

_creating_for: str | None = None


def shard(name: str) -> Shard:
    """The shard `name` selecting `SHARD_LABEL=name`, as the operator parses it."""
    return shard_from_settings(name, f"{SHARD_LABEL}={name}")


def shard_env(name: str) -> dict[str, str]:
    """The operator's settings for that shard."""
    return {"SHARD_NAME": name, "SHARD_SELECTOR": f"{SHARD_LABEL}={name}"}


def claim(manifest: dict, name: str) -> dict:
    """The manifest with shard `name`'s label and finalizer."""
    meta = manifest.setdefault("metadata", {})
    meta.setdefault("labels", {})[SHARD_LABEL] = name
    meta["finalizers"] = [shard(name).finalizer]
    return manifest


def claimed(manifest: dict) -> dict:
    """The manifest claimed for the shard the current test creates objects for, if any."""
    return claim(manifest, _creating_for) if _creating_for else manifest


@contextlib.contextmanager
def creating_for(name: str) -> Iterator[None]:
    """While the block runs, the helpers create objects claimed for shard `name`."""
    global _creating_for
    before, _creating_for = _creating_for, name
    try:
        yield
    finally:
        _creating_for = before
