"""Each mutant removes one quorum or deletion guard from the planner or the health
diagnosis; the simulator must kill it with a named invariant on some seed where the
unmutated planner behaves differently. Prints the table mutant -> invariant -> first seed."""

from __future__ import annotations

import os

import pytest

from tests.sim.campaign import BLOCK, CAMPAIGNS
from tests.sim.mutants import MUTANTS, SURVIVORS
from tests.sim.runner import run_seed

SCHEDULES = min(int(os.environ.get("SIM_MUTANT_SCHEDULES", "500")), BLOCK)
SURVIVOR_SCHEDULES = 150  # a documented survivor is re-checked on fewer seeds
TABLE: dict[str, tuple[int | None, str]] = {}


def _baseline() -> dict[int, tuple[str, str | None]]:
    """What the unmutated planner does on the same seeds (block 0 of the main campaign)."""
    return {r.seed: (r.violation.invariant, r.finding) for r in CAMPAIGNS["main"].block(0)}


def hunt(mutant) -> tuple[int | None, str]:
    baseline = _baseline()
    schedules = SURVIVOR_SCHEDULES if mutant.name in SURVIVORS else SCHEDULES
    with mutant.applied():
        for seed in range(schedules):
            result = run_seed(seed)
            if result.violation is None:
                continue
            if (result.violation.invariant, result.finding) != baseline.get(seed):
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
    lines = [f"{'mutant':<42} {'invariant':<42} first seed"]
    for mutant in MUTANTS:
        seed, invariant = TABLE[mutant.name]
        note = f"  ({SURVIVORS[mutant.name]})" if mutant.name in SURVIVORS else ""
        lines.append(f"{mutant.name:<42} {invariant:<42} {'-' if seed is None else seed}{note}")
    print("\n" + "\n".join(lines))
