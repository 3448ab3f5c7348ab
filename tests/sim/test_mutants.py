"""Each mutant removes one quorum or deletion guard from the planner or the health
diagnosis; the simulator must kill it with a named invariant on some seed where the
unmutated planner behaves differently. Prints the table mutant -> invariant -> first seed."""

from __future__ import annotations

import os

import pytest

from tests.sim import findings
from tests.sim.campaign import BLOCK, CAMPAIGNS
from tests.sim.mutants import MUTANTS, SURVIVORS
from tests.sim.runner import run_seed

SCHEDULES = min(int(os.environ.get("SIM_MUTANT_SCHEDULES", "500")), BLOCK)
SURVIVOR_SCHEDULES = 150  # a documented survivor is re-checked on fewer seeds
TABLE: dict[str, tuple[int | None, str]] = {}


def _baseline() -> dict[int, tuple[str, str | None]]:
    """What the unmutated planner does on the same seeds (block 0 of the main campaign)."""
    return {r.seed: (r.violation.invariant, r.finding) for r in CAMPAIGNS["main"].block(0)}


def _unmutated(seed: int, family: str):
    if family == "main":
        return _baseline().get(seed)
    result = run_seed(seed, family)
    return (result.violation.invariant, result.finding) if result.violation else None


def hunt(mutant) -> tuple[int | None, str]:
    schedules = SURVIVOR_SCHEDULES if mutant.name in SURVIVORS else SCHEDULES
    for seed in range(schedules):
        with mutant.applied():
            result = run_seed(seed, mutant.family)
        # A kill is a violation the unmutated planner does not show on that seed, and not one of
        # the open findings (those are the current planner's defects, not the mutant's).
        if result.violation is None or result.finding in findings.FINDINGS or result.finding in findings.STALE:
            continue
        if (result.violation.invariant, result.finding) != _unmutated(seed, mutant.family):
            return seed, result.violation.invariant
    return None, f"survived {schedules} schedules"


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_simulator_kills_mutant(mutant):
    seed, invariant = hunt(mutant)
    TABLE[mutant.name] = (seed, invariant)
    if mutant.name in SURVIVORS:
        assert seed is None, f"{mutant.name} is now killed by {invariant} (seed {seed}): drop it from SURVIVORS"
    else:
        assert seed is not None, f"mutant {mutant.name} ({mutant.guard}) survived {SCHEDULES} schedules"


def test_mutant_table():
    for mutant in MUTANTS:
        if mutant.name not in TABLE:
            TABLE[mutant.name] = hunt(mutant)
    lines = [f"{'mutant':<44} {'invariant':<40} {'first seed':<10} family"]
    for mutant in MUTANTS:
        seed, invariant = TABLE[mutant.name]
        note = "  (survivor, see mutants.SURVIVORS)" if mutant.name in SURVIVORS else ""
        lines.append(f"{mutant.name:<44} {invariant:<40} {'-' if seed is None else seed:<10} {mutant.family}{note}")
    print("\n" + "\n".join(lines))
