"""`kubectl etcd report`: the support bundle, built from what the plugin read. Pure: which
objects belong to a cluster, redaction, and the tar.gz. Nothing in the bundle may carry a
secret: Secret data, passwords, keys and tokens are replaced by REDACTED wherever they sit,
in object fields, annotations (kubectl's last-applied copy), event messages and log lines."""

from __future__ import annotations

import io
import json
import re
import tarfile
from collections.abc import Mapping
from typing import Any

import yaml

REDACTED = "<redacted>"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
# Field names whose value is a secret, compared lowercased without "-" and "_".
SECRET_FIELDS = frozenset(
    {
        "password",
        "passwd",
        "token",
        "bearertoken",
        "sessiontoken",
        "secret",
        "clientsecret",
        "secretaccesskey",
        "accesskeyid",
        "awssecretaccesskey",
        "awsaccesskeyid",
        "privatekey",
        "apikey",
        "xamzsecuritytoken",
        "authorization",
    }
)
_PEM = re.compile(r"-----BEGIN [A-Z0-9 ]+-----.*?(-----END [A-Z0-9 ]+-----|\Z)", re.DOTALL)
_NAMED_VALUE = re.compile(
    r"(?i)(?P<name>\b(?:password|passwd|token|bearer[_-]?token|session[_-]?token|client[_-]?secret|"
    r"(?:aws[_-]?)?secret[_-]?access[_-]?key|(?:aws[_-]?)?access[_-]?key[_-]?id|private[_-]?key|api[_-]?key|"
    r"x-amz-security-token|authorization)\b[\"']?\s*[:=]\s*[\"']?)(?:bearer\s+|basic\s+)?[^\s\"',;}]+"
)
_JWT = re.compile(r"\beyJ[\w-]{8,}\.[\w-]{8,}\.[\w-]*")
_AWS_KEY_ID = re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b")


def redact_text(text: str) -> str:
    text = _PEM.sub(REDACTED, text)
    text = _NAMED_VALUE.sub(lambda m: m.group("name") + REDACTED, text)
    text = _JWT.sub(REDACTED, text)
    return _AWS_KEY_ID.sub(REDACTED, text)


def _secret_field(name: str) -> bool:
    return name.lower().replace("-", "").replace("_", "") in SECRET_FIELDS


def redact(value: Any) -> Any:
    """A copy of `value` (an object, a list, an event) with every secret replaced: the data
    of a Secret, fields named as secrets, and secrets inside any text."""
    if isinstance(value, Mapping):
        is_secret = value.get("kind") == "Secret"
        out: dict[str, Any] = {}
        for k, v in value.items():
            if (is_secret and k in ("data", "stringData")) or (_secret_field(str(k)) and v not in (None, "")):
                out[k] = {name: REDACTED for name in v} if isinstance(v, Mapping) else REDACTED
            elif k == "annotations" and isinstance(v, Mapping):
                out[k] = {name: _annotation(name, text) for name, text in v.items()}
            elif k == "managedFields":
                continue  # who wrote which field: noise in a report
            else:
                out[k] = redact(v)
        return out
    if isinstance(value, list):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    return value


def _annotation(name: str, text: Any) -> Any:
    if name != LAST_APPLIED or not isinstance(text, str):
        return redact(text)
    try:
        return json.dumps(redact(json.loads(text)), sort_keys=True)
    except ValueError:
        return REDACTED


def belongs_to(cluster: str, backups: list[Mapping[str, Any]], restores: list[Mapping[str, Any]]) -> tuple[list, list]:
    """The cluster's EtcdBackups (spec.clusterRef) and the EtcdRestores that restore into it
    or from one of those backups."""
    own = [b for b in backups if ((b.get("spec") or {}).get("clusterRef") or {}).get("name") == cluster]
    names = {b["metadata"]["name"] for b in own}
    kept = []
    for r in restores:
        spec = r.get("spec") or {}
        target = spec.get("target") or {}
        into = (target.get("inPlace") or {}).get("clusterName") or (target.get("newCluster") or {}).get("name")
        source = ((spec.get("source") or {}).get("backupRef") or {}).get("name")
        if into == cluster or source in names:
            kept.append(r)
    return own, kept


def about(events: list[Mapping[str, Any]], wanted: set[tuple[str, str]]) -> list[Mapping[str, Any]]:
    """The events whose involved object is one of `wanted` (kind, name)."""
    return [e for e in events if _involved(e) in wanted]


def _involved(event: Mapping[str, Any]) -> tuple[Any, Any]:
    ref = event.get("involvedObject") or {}
    return ref.get("kind"), ref.get("name")


def bundle(files: Mapping[str, Any], mtime: float) -> bytes:
    """A tar.gz of `files` (name: data, or text), every value redacted on the way in: a
    mapping or list is written as YAML, text as it is."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, content in files.items():
            if isinstance(content, (Mapping, list)):
                data = yaml.safe_dump(redact(content), sort_keys=True).encode()
            else:
                data = redact_text(str(content)).encode()
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), int(mtime), 0o600
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()
