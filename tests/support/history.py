"""A client history of puts and gets on a few keys, as the linearizability checker reads it
(e2e/testbin/porcupine/main.go), with the figures a scenario reports: operations, unknown
outcomes, and the longest stretch without a successful operation in a window."""

from __future__ import annotations

import dataclasses
import itertools
import json
import subprocess

from localkube import layout as localkube_layout

CHECKER = ("porcupine", "linearizability-check")
NOT_LINEARIZABLE = 1


@dataclasses.dataclass(frozen=True)
class Operation:
    client: int
    op: str  # "put" or "get"
    key: str
    value: str | None  # put: what it wrote; get: what it read (None: absent)
    call: int  # ns on the recording process's monotonic clock
    returned: int | None  # None: a put whose outcome is unknown

    def as_json(self) -> dict:
        return {
            "client": self.client,
            "op": self.op,
            "key": self.key,
            "value": self.value,
            "call": self.call,
            "return": self.returned,
        }


@dataclasses.dataclass(frozen=True)
class Verdict:
    linearizable: bool
    status: int  # the checker's exit status: 0, 1 not linearizable, 2 no verdict in time, 3 bad input
    report: str


def to_json(operations: list[Operation]) -> str:
    return json.dumps({"operations": [o.as_json() for o in operations]})


def checker_binary():
    return localkube_layout.testbin_dir().joinpath(*CHECKER)


def check(operations: list[Operation], timeout: float = 600.0, visualize: str | None = None) -> Verdict:
    argv = [str(checker_binary()), f"-timeout={int(timeout)}s"]
    if visualize:
        argv.append(f"-visualize={visualize}")
    done = subprocess.run(argv, input=to_json(operations), capture_output=True, text=True, timeout=timeout + 60)
    return Verdict(done.returncode == 0, done.returncode, done.stdout + done.stderr)


def unknown_outcomes(operations: list[Operation]) -> int:
    return sum(1 for o in operations if o.returned is None)


def longest_gap(successes: list[int], start: int, end: int) -> int:
    """The longest time within [start, end] with no successful operation returning, from the
    sorted return times of the successful operations."""
    inside = [t for t in successes if start <= t <= end]
    edges = [start, *inside, end]
    return max(b - a for a, b in itertools.pairwise(edges))
