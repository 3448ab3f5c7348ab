"""The backup executor's step table: every step has a handler; an unknown step is an error."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime

import pytest

from etcd_operator.backup import steps as s
from etcd_operator.backup.controller import delay_after
from etcd_operator.backup.executor import HANDLERS, BackupExecutor, UnknownStep
from etcd_operator.backup.status import build_status

BODY = {"metadata": {"namespace": "ns", "name": "b"}, "spec": {}}
NOW = datetime.datetime(2026, 11, 21, tzinfo=datetime.timezone.utc)


def all_step_types(base: type = s.Step) -> set[type]:
    found = set()
    for sub in base.__subclasses__():
        if sub.__module__ == s.__name__:
            found |= {sub} | all_step_types(sub)
    return found


def test_every_step_type_has_a_handler():
    """Every step class defined in backup/steps.py, listed or not."""
    assert all_step_types() == set(s.ALL_STEPS) == set(HANDLERS)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Mystery(s.Step):
    pass


def test_an_unknown_step_is_an_error_not_done():
    with pytest.raises(UnknownStep):
        asyncio.run(BackupExecutor(None, {}, BODY).run(Mystery()))
    with pytest.raises(TypeError):
        build_status(Mystery(), s.NOTHING_DONE, {}, 1, "2026-11-21T00:00:00Z")
    with pytest.raises(TypeError):
        delay_after(Mystery(), NOW)


@pytest.mark.parametrize("step", [s.Idle(), s.Suspend(), s.RefuseSchedule(reason="InvalidSchedule"),
                                  s.WaitForSlot(next_slot=NOW),
                                  s.StartSlot(slot="x", slot_time=None, next_slot=None, one_shot=True)])
def test_steps_without_io_change_nothing_but_status(step):
    assert asyncio.run(BackupExecutor(None, {}, BODY).run(step)) is s.NOTHING_DONE
