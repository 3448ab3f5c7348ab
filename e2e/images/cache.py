"""Where built images are kept: one archive per image, named by a hash of its inputs, under
~/.cache/etcd-operator/images (ETCD_OPERATOR_IMAGES or XDG_CACHE_HOME move it)."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re

# Part of every key: a change to how archives are written rebuilds them all.
WRITER_VERSION = "1"


def directory() -> pathlib.Path:
    if os.environ.get("ETCD_OPERATOR_IMAGES"):
        return pathlib.Path(os.environ["ETCD_OPERATOR_IMAGES"])
    base = os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
    return pathlib.Path(base) / "etcd-operator" / "images"


def key(inputs: object) -> str:
    encoded = json.dumps([WRITER_VERSION, inputs], sort_keys=True, default=str).encode()
    return hashlib.sha256(encoded).hexdigest()[:12]


def archive_path(name: str, inputs: object) -> pathlib.Path:
    """registry.k8s.io/pause:3.10 -> <cache>/registry.k8s.io_pause_3.10-<key>.oci.tar"""
    slug = re.sub(r"[^A-Za-z0-9.-]+", "_", name)
    return directory() / f"{slug}-{key(inputs)}.oci.tar"
