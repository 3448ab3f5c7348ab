"""Fixtures for the substrate tier."""

from __future__ import annotations

import pytest

from tests.support.operator_process import OperatorProcess


@pytest.fixture
def operator(substrate, namespace):
    """The operator as a real process, watching only this test's namespace."""
    process = OperatorProcess(substrate, namespace).start()
    yield process
    process.stop()
