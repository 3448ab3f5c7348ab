"""The one security context every pod the operator creates runs with: it passes the
Kubernetes `restricted` Pod Security level. Pure.

Pod level: a fixed non-root user and group, the RuntimeDefault seccomp profile, and an
fsGroup, so a fresh volume (whose root directory belongs to root) is writable by the
process; kubelet changes ownership only when the volume root does not match already.
Container level: no privilege escalation, every capability dropped, a read-only root
file system (processes write only to their mounted volumes)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

# The distroless "nonroot" user; any image works, the user needs no /etc/passwd entry.
RUN_AS_USER = 65532
RUN_AS_GROUP = 65532
FS_GROUP = 65532

CONTAINER_LISTS = ("initContainers", "containers")


def pod_security_context() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_USER,
        "runAsGroup": RUN_AS_GROUP,
        "fsGroup": FS_GROUP,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def restricted(pod_spec: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `pod_spec` with the restricted security context on the pod and on every
    container and init container. The restricted settings win over anything in the input."""
    hardened = copy.deepcopy(dict(pod_spec))
    hardened["securityContext"] = {**(hardened.get("securityContext") or {}), **pod_security_context()}
    for field in CONTAINER_LISTS:
        for container in hardened.get(field) or []:
            container["securityContext"] = {**(container.get("securityContext") or {}), **container_security_context()}
    return hardened
