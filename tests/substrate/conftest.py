"""Fixtures for the substrate tier: the node agent's substrate (tests/support/substrate_fixtures.py)
and the operator as a process on it."""

from __future__ import annotations

import pytest

from tests.support import substrate_fixtures
from tests.support.operator_process import OperatorProcess


def pytest_configure(config):
    substrate_fixtures.register(config)


@pytest.fixture
def operator(substrate, namespace):
    """The operator as a real process, watching only this test's namespace."""
    process = OperatorProcess(substrate, namespace).start()
    yield process
    process.stop()
