"""Kubernetes knows two event types, Normal and Warning. Every event the operator posts goes
through handlers.common.event_poster, which refuses any other; no code calls kopf's own
posters (kopf.exception posts "Error"), and kopf never turns log lines into events."""

from __future__ import annotations

import ast
import pathlib

import pytest

from etcd_operator.handlers import common

PACKAGE = pathlib.Path(common.__file__).resolve().parents[1]
TYPES = {"Normal", "Warning"}
# Every type kopf or a logging level could name; a literal among them must be one of TYPES.
TYPE_LIKE = TYPES | {"Error", "Fatal", "Info", "Debug", "Critical"}


def modules() -> list[tuple[pathlib.Path, ast.Module]]:
    return [(path, ast.parse(path.read_text(), str(path))) for path in sorted(PACKAGE.rglob("*.py"))]


def kopf_call(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "kopf":
        return func.attr
    return None


def test_only_the_event_poster_calls_kopf_and_never_its_error_poster():
    calls = [
        (path.relative_to(PACKAGE.parent).as_posix(), name)
        for path, tree in modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and (name := kopf_call(node)) in ("event", "exception", "info", "warn")
    ]
    assert calls == [("etcd_operator/handlers/common.py", "event")]


def test_every_literal_event_type_is_normal_or_warning():
    """Event tuples ((type, reason, message)) and post_event calls with a literal type."""
    found = []
    for path, tree in modules():
        for node in ast.walk(tree):
            first = None
            if isinstance(node, ast.Tuple) and len(node.elts) == 3:
                first = node.elts[0]
            elif isinstance(node, ast.Call) and node.args:
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name in ("post_event", "post"):
                    first = node.args[0]
            if isinstance(first, ast.Constant) and first.value in TYPE_LIKE:
                found.append((path.name, node.lineno, first.value))
    assert found, "the scan sees the operator's events"
    assert [f for f in found if f[2] not in TYPES] == []


def test_kopf_never_posts_log_lines_as_events():
    """With posting.loggers on, kopf posts an ERROR line (its own "Handler failed") as type
    Error; the operator's settings keep it off."""
    tree = ast.parse((PACKAGE / "runtime" / "operator.py").read_text())
    set_to = [
        node.value.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and any(ast.unparse(t) == "settings.posting.loggers" for t in node.targets)
    ]
    assert set_to == [False]


@pytest.fixture
def posted(monkeypatch):
    sent: list[tuple[str, str, str]] = []
    monkeypatch.setattr(
        common.kopf, "event", lambda body, *, type, reason, message: sent.append((type, reason, message))
    )
    return sent


@pytest.mark.parametrize("type_", ["Normal", "Warning"])
def test_the_poster_posts_normal_and_warning(posted, type_):
    common.event_poster({"metadata": {"name": "c"}})(type_, "MemberAdded", "c-3 joined")
    assert posted == [(type_, "MemberAdded", "c-3 joined")]


@pytest.mark.parametrize("type_", ["Error", "Fatal", "normal", ""])
def test_the_poster_refuses_any_other_type(posted, type_):
    with pytest.raises(ValueError, match="event type"):
        common.event_poster({"metadata": {"name": "c"}})(type_, "ReconcileFailed", "boom")  # type: ignore[arg-type]
    assert posted == []
