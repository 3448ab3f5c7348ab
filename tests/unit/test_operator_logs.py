"""The operator's log lines as they reach stderr (runtime/logs.py): JSON or plain text, every
line about an object naming it, whichever logger wrote it, and no secret at DEBUG."""

from __future__ import annotations

import asyncio
import json
import logging

import kopf
import pytest

from etcd_operator.core.cluster import steps as a
from etcd_operator.handlers.common import run_until_deleted
from etcd_operator.runtime import logs
from tests.unit.cluster_scenarios import CLUSTER, NAMESPACE
from tests.unit.test_watch_reconcile import BODY, RecordingKube, reconciler_with_two_views

KIND, API_VERSION = "EtcdCluster", "etcd.operator.dev/v1alpha1"
CLUSTER_BODY = {"apiVersion": API_VERSION, "kind": KIND, **BODY}


@pytest.fixture
def configured(capsys):
    """logs.configure for one test, and what reached stderr; the loggers as they were after."""
    root = logging.getLogger()
    touched = [logging.getLogger(n) for n in (*logs.CHATTY_LIBRARIES, "asyncio")]
    saved = (root.handlers[:], root.level, [(lg, lg.level, lg.propagate, lg.handlers[:]) for lg in touched])

    def configure(log_format: str, level: str = "INFO"):
        capsys.readouterr()
        logs.configure(log_format, level)
        return lambda: capsys.readouterr().err

    yield configure
    root.handlers[:], level, loggers = saved
    root.setLevel(level)
    for lg, lg_level, propagate, handlers in loggers:
        lg.setLevel(lg_level)
        lg.propagate, lg.handlers[:] = propagate, handlers


class StatusWriteFails(RecordingKube):
    async def merge_patch(self, resource, namespace, name, patch, subresource=None):
        raise RuntimeError("the API server went away")


class OnePass:
    """The daemon's `stopped`: set once the first pass sleeps."""

    def __init__(self):
        self.set = False

    def __bool__(self):
        return self.set

    async def wait(self, timeout=None):
        self.set = True


def a_failing_pass():
    """One daemon pass of the cluster handler's adapter over the real reconciler: the pass
    decides on cached state (the reconciler's module logger says so), looks live, and its
    status write fails (the adapter logs it through kopf's per-object logger)."""
    reconciler, _ = reconciler_with_two_views(StatusWriteFails())
    reconciler.last_action, reconciler.next_resync = a.Steady(), float("inf")  # the caches may be read
    settings = kopf.OperatorSettings()
    settings.posting.enabled = False  # no event queue outside a running operator
    kopf_logger = kopf.ObjectLogger(body=CLUSTER_BODY, settings=settings)
    asyncio.run(run_until_deleted(reconciler, CLUSTER_BODY, OnePass(), kopf_logger, error_backoff=1.0))
    logging.getLogger("etcd_operator.runtime.lease_elector").info("not about any object")


def test_json_lines_each_name_the_object_the_handler_works_on(configured):
    output = configured("json")
    a_failing_pass()
    lines = [json.loads(line) for line in output().splitlines()]
    about, other = lines[:-1], lines[-1]
    assert {line["logger"] for line in about} >= {"kopf.objects", "etcd_operator.controllers.cluster.reconciler"}
    for line in about:
        assert {k: line["object"][k] for k in ("kind", "namespace", "name")} == {
            "kind": KIND,
            "namespace": NAMESPACE,
            "name": CLUSTER,
        }, line
    (failed,) = [line for line in about if line["message"].startswith("reconcile failed")]
    assert failed["severity"] == "error" and "the API server went away" in failed["exc_info"]
    assert any("decided on cached state" in line["message"] for line in about)
    assert other["message"] == "not about any object" and "object" not in other


def test_plain_lines_name_the_object_before_the_logger(configured):
    output = configured("plain")
    a_failing_pass()
    text = output()
    failed = next(line for line in text.splitlines() if "reconcile failed" in line)
    assert f" ERROR [{NAMESPACE}/{CLUSTER}] kopf.objects reconcile failed: the API server went away" in failed
    cached = next(line for line in text.splitlines() if "decided on cached state" in line)
    assert f" INFO [{NAMESPACE}/{CLUSTER}] etcd_operator.controllers.cluster.reconciler " in cached
    assert text.splitlines()[-1].endswith(" INFO etcd_operator.runtime.lease_elector not about any object")


def test_debug_reaches_the_operators_loggers_but_not_the_s3_libraries_request_headers(configured):
    output = configured("json", "DEBUG")
    token = "FwoGZXIvYXdzEXAMPLESESSIONTOKEN"
    logging.getLogger("botocore.endpoint").debug("Sending http request: {'X-Amz-Security-Token': b'%s'}", token)
    logging.getLogger("urllib3.connectionpool").debug("headers %s", token)
    logging.getLogger("etcd_operator.writes").debug("sending PATCH /api/v1/namespaces/ns/pods/c-0")
    text = output()
    assert token not in text
    assert [json.loads(line)["message"] for line in text.splitlines()] == [
        "sending PATCH /api/v1/namespaces/ns/pods/c-0"
    ]
