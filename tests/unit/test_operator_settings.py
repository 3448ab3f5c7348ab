"""Every operator setting in docs/reference/operator-settings.md is read, every setting read is
documented, and every setting read is used: none is read and then ignored."""

from __future__ import annotations

import ast
import dataclasses
import functools
import pathlib
import re

import pytest

from etcd_operator import __main__ as entry
from etcd_operator.controllers import faults
from etcd_operator.runtime.config import OperatorConfig

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs/reference/operator-settings.md").read_text()
DOCUMENTED = set(re.findall(r"^\| `([A-Z][A-Z0-9_]*)` \|", PAGE, re.M))
FROM_KUBERNETES = {"POD_NAME", "POD_NAMESPACE"}  # the downward API sets them; the page says so below the table


class Recording(dict):
    """An environment that notes every variable asked for."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.asked: set[str] = set()

    def get(self, key, default=None):
        self.asked.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        self.asked.add(key)
        return super().__getitem__(key)


def read_by_the_settings_module() -> set[str]:
    env = Recording()
    OperatorConfig.from_env(env)
    return env.asked


def test_every_documented_setting_is_read(monkeypatch):
    monkeypatch.setenv("ETCD_OPERATOR_FAULTS", "after-member-add, during-restore")
    assert faults.enabled() == {"after-member-add", "during-restore"}  # the test-only one, read where it acts
    assert DOCUMENTED - read_by_the_settings_module() == {"ETCD_OPERATOR_FAULTS"}


def test_every_setting_read_is_documented():
    read = read_by_the_settings_module()
    assert read - DOCUMENTED == FROM_KUBERNETES
    assert all(f"`{name}`" in PAGE for name in FROM_KUBERNETES)


def test_the_usage_text_names_only_settings_that_are_read():
    named = set(re.findall(r"^  ([A-Z][A-Z0-9_]+) ", entry.USAGE, re.M))
    assert named and named <= read_by_the_settings_module()


@functools.cache
def attributes_read_outside_the_settings_module() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "etcd_operator").rglob("*.py"):
        if path.name == "config.py" and path.parent.name == "runtime":
            continue
        names |= {node.attr for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Attribute)}
    return names


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(OperatorConfig)])
def test_every_setting_read_is_used(field):
    assert field in attributes_read_outside_the_settings_module(), f"OperatorConfig.{field} is read and never used"


@pytest.mark.parametrize(("variable", "value"), [("LOG_FORMAT", "yaml"), ("LOG_LEVEL", "LOUD")])
def test_a_setting_with_a_value_it_cannot_take_stops_the_start(variable, value):
    with pytest.raises(ValueError, match=variable):
        OperatorConfig.from_env({variable: value})


def test_log_settings_take_any_case():
    config = OperatorConfig.from_env({"LOG_FORMAT": "JSON", "LOG_LEVEL": "debug"})
    assert (config.log_format, config.log_level) == ("json", "DEBUG")
