"""The operator's log output (LOG_FORMAT, LOG_LEVEL): one handler on the root logger, and
every line about an object names it.

kopf's per-object logger carries the object itself (`k8s_ref`); the operator's module
loggers get it from the handler that is running (handlers/common.py, `logging_about`).
Plain text, the default, puts `[namespace/name]` before the logger's name:

    2026-12-02 11:04:59,123 ERROR [ns/app] kopf.objects reconcile failed: ...

JSON is kopf's formatter, one object per line, the reference under `object`
(apiVersion, kind, name, uid, namespace)."""

from __future__ import annotations

import copy
import logging
import sys

import kopf

from etcd_operator.handlers.common import ObjectOfTheHandler

OBJECT_KEY = "object"  # where JSON lines carry the object
PLAIN = "%(asctime)s %(levelname)s %(about)s%(name)s %(message)s"

# Libraries whose DEBUG lines carry request headers and bodies: an S3 session token
# (X-Amz-Security-Token), snapshot bytes. Under LOG_LEVEL=DEBUG they stay at INFO.
CHATTY_LIBRARIES = ("botocore", "boto3", "s3transfer", "urllib3", "kubernetes_asyncio", "aiohttp")


class PlainText(logging.Formatter):
    def __init__(self) -> None:
        super().__init__(PLAIN)

    def format(self, record: logging.LogRecord) -> str:
        ref = getattr(record, "k8s_ref", None) or {}
        record = copy.copy(record)  # other handlers see the record unchanged
        namespace, name = ref.get("namespace"), ref.get("name")
        record.about = f"[{namespace}/{name}] " if namespace else f"[{name}] " if name else ""
        return super().format(record)


def configure(log_format: str, level: str) -> None:
    """The root logger's one handler, in `log_format` ("plain" or "json"), at `level`."""
    root = logging.getLogger()
    if log_format == "json":
        before = set(root.handlers)
        kopf.configure(verbose=level == "DEBUG", log_format=kopf.LogFormat.JSON, log_refkey=OBJECT_KEY)
        handlers = [h for h in root.handlers if h not in before]
    else:
        handlers = [logging.StreamHandler(sys.stderr)]
        handlers[0].setFormatter(PlainText())
        root.addHandler(handlers[0])
    for handler in handlers:
        handler.addFilter(ObjectOfTheHandler())
    root.setLevel(level)
    for name in CHATTY_LIBRARIES:
        logging.getLogger(name).setLevel(max(logging.getLevelName(level), logging.INFO))
