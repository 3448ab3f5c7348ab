"""The downward API: values of pod fields (fieldRef) and container resources
(resourceFieldRef), for env vars and downwardAPI volumes."""

from __future__ import annotations

import math
import os
import re

LABEL_OR_ANNOTATION = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")
QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")
SUFFIXES = {
    "": 1,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


class FieldError(Exception):
    pass


def field_value(pod: dict, path: str) -> str:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    match = LABEL_OR_ANNOTATION.match(path)
    if match:
        return (meta.get(match.group(1)) or {}).get(match.group(2), "")
    if path in ("metadata.labels", "metadata.annotations"):
        items = meta.get(path.split(".")[1]) or {}
        return "\n".join(f'{k}="{v}"' for k, v in sorted(items.items()))
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName") or "default",
        "status.podIP": status.get("podIP"),
        "status.hostIP": status.get("hostIP"),
        "status.podIPs": ",".join(p["ip"] for p in status.get("podIPs") or []),
        "status.hostIPs": ",".join(p["ip"] for p in status.get("hostIPs") or []),
    }
    if path not in simple:
        raise FieldError(f"unsupported fieldRef path {path!r}")
    return simple[path] or ""


def parse_quantity(text: str | int | float) -> float:
    match = QUANTITY.match(str(text).strip())
    if not match or match.group(2) not in SUFFIXES:
        raise FieldError(f"invalid quantity {text!r}")
    return float(match.group(1)) * SUFFIXES[match.group(2)]


def resource_value(container: dict, resource: str, divisor: str | None) -> str:
    kind, _, name = resource.partition(".")
    resources = container.get("resources") or {}
    value = (resources.get(kind) or {}).get(name)
    if value is None and kind == "requests":
        value = (resources.get("limits") or {}).get(name)
    if value is None:
        value = _node_allocatable(name) if kind == "limits" else 0
    amount = parse_quantity(value) / parse_quantity(divisor or "1")
    return str(int(math.ceil(amount)))


def _node_allocatable(name: str) -> float:
    if name == "cpu":
        return float(os.cpu_count() or 1)
    if name == "memory":
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    return 0.0
