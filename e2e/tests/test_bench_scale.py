"""The scale benchmark's pure parts: the line fit and projection, audit log counting by user
agent, the reaction time read from the audit log, and Prometheus sums (e2e/bench/scale.py)."""

from __future__ import annotations

import datetime
import json

import pytest

from bench import scale

T0 = datetime.datetime(2026, 11, 21, 21, 0, 0, tzinfo=datetime.UTC).timestamp()


def stamp(seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(T0 + seconds, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def event(
    at: float,
    verb: str,
    agent: str = "etcd-operator/0.1.0",
    stage: str = "ResponseComplete",
    resource: str = "pods",
    name: str | None = None,
    namespace: str = "ns",
    subresource: str | None = None,
    code: int = 200,
    done: float | None = None,
) -> dict:
    ref = {"resource": resource, "namespace": namespace, "apiVersion": "v1"}
    if name:
        ref["name"] = name
    if subresource:
        ref["subresource"] = subresource
    return {
        "kind": "Event",
        "stage": stage,
        "verb": verb,
        "userAgent": agent,
        "objectRef": ref,
        "requestURI": f"/api/v1/namespaces/{namespace}/{resource}",
        "responseStatus": {"code": code},
        "requestReceivedTimestamp": stamp(at),
        "stageTimestamp": stamp(at if done is None else done),
    }


# --- the line and its projection ---


def test_fit_line_recovers_an_exact_line():
    line = scale.fit_line([(10, 25.0), (30, 65.0), (60, 125.0)])
    assert line.slope == pytest.approx(2.0)
    assert line.intercept == pytest.approx(5.0)
    assert line.at(100) == pytest.approx(205.0)
    assert line.at(1000) == pytest.approx(2005.0)


def test_fit_line_is_least_squares_over_noisy_points():
    line = scale.fit_line([(0, 1.0), (1, 3.0), (2, 2.0)])
    assert line.slope == pytest.approx(0.5)
    assert line.intercept == pytest.approx(1.5)


def test_one_measured_n_gives_a_line_through_the_origin():
    line = scale.fit_line([(10, 30.0)])
    assert line.at(100) == pytest.approx(300.0)


def test_no_points_is_an_error():
    with pytest.raises(ValueError):
        scale.fit_line([])


# --- counting requests by user agent ---


def test_counts_only_the_operators_agents_and_only_inside_the_window():
    events = [
        event(1, "list", agent="etcd-operator/0.1.0"),
        event(2, "create", agent="kopf/1.45.2", resource="events"),
        event(3, "list", agent="kubectl/v1.35.4"),
        event(4, "get", agent="Python/3.11 aiohttp/3.14.5"),
        event(-1, "list"),  # before the window
        event(60, "list"),  # at its end: outside
    ]
    count = scale.count_requests(events, T0, T0 + 60)
    assert count.requests == 2
    assert count.by_kind == {"list pods": 1, "create events": 1}


def test_a_watch_counts_once_when_opened_and_not_as_a_request():
    events = [
        event(1, "watch", stage="ResponseStarted", agent="kopf/1.45.2"),
        event(1, "watch", stage="ResponseComplete", agent="kopf/1.45.2"),  # its end, later in the file
        event(2, "list", stage="ResponseStarted"),  # not a stage counted for a non-watch
        event(2, "list"),
    ]
    count = scale.count_requests(events, T0, T0 + 60)
    assert (count.requests, count.watches) == (1, 1)
    assert count.per_minute(30) == (2.0, 2.0)


def test_subresources_are_named():
    count = scale.count_requests([event(1, "patch", resource="etcdclusters", subresource="status")], T0, T0 + 60)
    assert count.by_kind == {"patch etcdclusters/status": 1}


def test_audit_time_keeps_microseconds():
    assert scale.audit_time("2026-11-21T21:00:00.250000Z") - T0 == pytest.approx(0.25)


def test_requests_of_the_operators_user_under_another_agent_are_named():
    def by(user: str, agent: str, at: float = 1) -> dict:
        return {**event(at, "list", agent=agent), "user": {"username": user}}

    events = [
        by("admin", "etcd-operator/0.1.0"),
        by("admin", "kopf/1.45.2"),
        by("admin", "kubectl/v1.35.4"),  # the bench itself
        by("admin", "OpenAPI-Generator/36.1.0/python"),  # a client without the operator's agent
        by("admin", "OpenAPI-Generator/36.1.0/python", at=-5),  # outside the window
        by("kube-scheduler", "Python/3.11 aiohttp/3.14.5"),  # another user
    ]
    assert scale.unattributed_agents(events, T0, T0 + 60) == {"OpenAPI-Generator/36.1.0/python": 1}


# --- the reaction time ---


def test_reaction_runs_from_the_deletion_to_the_operators_create():
    events = [
        event(10.0, "delete", agent="kubectl/v1.35.4", name="s0000-0"),
        event(10.5, "delete", agent="Python/3.11 aiohttp/3.14.5", name="s0000-0", done=10.6),  # object gone
        event(12.0, "create", name="s0000-0", code=201),
    ]
    reaction = scale.pod_reaction(events, "ns", "s0000-0", T0 + 10.0)
    assert reaction.seconds == pytest.approx(2.0)
    assert reaction.after_gone == pytest.approx(1.4)


def test_no_reaction_until_the_operator_creates_that_pod():
    events = [
        event(10.0, "delete", agent="kubectl/v1.35.4", name="s0000-0"),
        event(11.0, "create", name="s0001-0", code=201),  # another cluster's pod
        event(11.0, "create", name="s0000-0", code=409),  # refused: the old object was still there
        event(11.5, "create", name="s0000-0", agent="kubectl/v1.35.4", code=201),  # not the operator
        event(9.0, "create", name="s0000-0", code=201),  # before the deletion
        event(12.0, "create", name="s0000-0", subresource="binding", code=201),
    ]
    assert scale.pod_reaction(events, "ns", "s0000-0", T0 + 10.0) is None


# --- member metrics ---


def test_prometheus_sum_adds_every_label_set_of_one_metric_only():
    text = "\n".join(
        [
            "# HELP grpc_server_started_total Total number of RPCs started on the server.",
            'grpc_server_started_total{grpc_method="Range",grpc_service="etcdserverpb.KV",grpc_type="unary"} 7',
            'grpc_server_started_total{grpc_method="Status",grpc_service="etcdserverpb.Maintenance",'
            'grpc_type="unary"} 3',
            'grpc_server_started_total_other{a="b"} 100',
            "promhttp_metric_handler_requests_total 2",
        ]
    )
    assert scale.prometheus_sum(text, "grpc_server_started_total") == 10
    assert scale.prometheus_sum(text, "promhttp_metric_handler_requests_total") == 2


def test_the_audit_log_is_read_from_an_offset_and_a_partial_last_line_waits(tmp_path):
    path = tmp_path / "audit.log"
    path.write_text(json.dumps(event(1, "list")) + "\n")
    log = scale.AuditLog(path)
    offset = log.offset()
    with open(path, "a") as f:
        f.write(json.dumps(event(2, "get")) + "\n" + '{"kind": "Event", "objectRef": {"resource": "pods"}')
    assert [e["verb"] for e in log.events(offset)] == ["get"]
    path.write_text("")
    with pytest.raises(RuntimeError, match="rotated"):
        log.events(offset)


def test_a_profile_frame_is_named_by_function_and_file_without_its_line():
    assert scale._frame_name("ClusterReconciler._pass (etcd_operator/controllers/cluster/reconciler.py:231)") == (
        "ClusterReconciler._pass reconciler.py"
    )
    assert scale._frame_name("_run_code (<frozen runpy>:88)") == "_run_code <frozen runpy>"
    assert scale._frame_name('process 12:"python -m etcd_operator"') == 'process 12:"python -m etcd_operator"'
