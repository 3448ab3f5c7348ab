"""What the real-node tests measure (the nodes' bring-up, times to recover from node faults):
each line is printed where it happens (with -s) and again in the session's summary, so that
every `make test` reports them without -s. Measurements only; no test asserts on them."""

from __future__ import annotations

REPORTED: list[str] = []


def report(line: str) -> None:
    REPORTED.append(line)
    print(line)
