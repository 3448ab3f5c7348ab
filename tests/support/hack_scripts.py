"""The generators under hack/ (scripts, not a package), loaded as modules for the tests that
check their output is committed."""

from __future__ import annotations

import importlib.util
import pathlib
import types

HACK = pathlib.Path(__file__).resolve().parents[2] / "hack"


def load(name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, HACK / f"{name}.py")
    assert spec is not None and spec.loader is not None, name
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
