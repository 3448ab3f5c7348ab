"""Runs blocks of seeds, keeps what the tests and the coverage report need (violations,
per-schedule action counts, statistics), and caches them for the session."""

from __future__ import annotations

import collections
import os
import time

from tests.sim.runner import Result, run_seed

BLOCK = 500
SCHEDULES = {
    "main": int(os.environ.get("SIM_SCHEDULES", "10000")),
    "stale_replica": int(os.environ.get("SIM_STALE_SCHEDULES", "1000")),
    "restore_hold": int(os.environ.get("SIM_RESTORE_HOLD_SCHEDULES", "500")),
    "refused_pod": int(os.environ.get("SIM_REFUSED_POD_SCHEDULES", "500")),
    "restore_race": int(os.environ.get("SIM_RESTORE_RACE_SCHEDULES", "200")),
    "backup_race": int(os.environ.get("SIM_BACKUP_RACE_SCHEDULES", "150")),
}


class Campaign:
    def __init__(self, family: str):
        self.family = family
        self.blocks: dict[int, list[Result]] = {}  # violations only
        self.schedules = 0
        self.steps = 0
        self.seconds = 0.0
        self.with_action: collections.Counter = collections.Counter()  # schedules that took each action
        self.totals: collections.Counter = collections.Counter()  # actions taken in all
        self.stats: collections.Counter = collections.Counter()  # schedules with each statistic > 0
        self.stat_totals: collections.Counter = collections.Counter()

    @property
    def block_count(self) -> int:
        return (SCHEDULES[self.family] + BLOCK - 1) // BLOCK

    def block(self, index: int) -> list[Result]:
        if index not in self.blocks:
            start = time.perf_counter()
            found = []
            stop = min((index + 1) * BLOCK, SCHEDULES[self.family])
            for seed in range(index * BLOCK, stop):
                result = run_seed(seed, self.family)
                self._count(result)
                if result.violation is not None:
                    found.append(result)
            self.blocks[index] = found
            self.seconds += time.perf_counter() - start
        return self.blocks[index]

    def _count(self, result: Result) -> None:
        self.schedules += 1
        self.steps += result.steps
        for kind, n in result.actions.items():
            self.with_action[kind] += 1
            self.totals[kind] += n
        for key, n in result.stats.items():
            if n:
                self.stats[key] += 1
                self.stat_totals[key] += n

    def all_violations(self) -> list[Result]:
        return [r for i in range(self.block_count) for r in self.block(i)]


CAMPAIGNS = {family: Campaign(family) for family in SCHEDULES}


def coverage_table(campaign: Campaign) -> str:
    lines = [
        f"fault simulator, family {campaign.family}: {campaign.schedules} schedules, {campaign.steps} passes, "
        f"{campaign.seconds:.1f}s"
    ]
    lines.append("  action                 schedules   total")
    for kind, n in sorted(campaign.with_action.items(), key=lambda kv: -kv[1]):
        lines.append(f"  {kind:<22} {n:>9} {campaign.totals[kind]:>7}")
    lines.append("  statistic              schedules   total")
    for key, n in sorted(campaign.stats.items()):
        lines.append(f"  {key:<30} {n:>6} {campaign.stat_totals[key]:>7}")
    found = collections.Counter((r.violation.invariant, r.finding) for r in campaign.all_violations())
    if found:
        lines.append("  violations (invariant, known finding): schedules")
        for (invariant, finding), n in sorted(found.items(), key=lambda kv: -kv[1]):
            lines.append(f"  {invariant} / {finding or 'UNKNOWN'}: {n}")
    return "\n".join(lines)
