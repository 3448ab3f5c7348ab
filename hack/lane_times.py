"""Each lane's seconds by test module, from the JUnit XML files of `make test`'s pytest runs
(tests/run.sh), to balance the lanes by their markers (lane2, lane3, lane4, lane5, lane6) with
figures instead of guesses. A module's time is the sum of its tests' setup, call and teardown,
so a hold on the nodes that a test waited for counts where it was waited.

    hack/lane_times.py NAME=FILE.xml ... [--top N]
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import xml.etree.ElementTree as ElementTree


def module_seconds(junit_xml: str) -> dict[str, float]:
    """Seconds by module path. A test case's classname is its module's dotted path, and its
    class's name after it when it has one (`tests.nodes.test_x.TestY` is tests/nodes/test_x.py)."""
    totals: dict[str, float] = collections.defaultdict(float)
    for case in ElementTree.fromstring(junit_xml).iter("testcase"):
        parts = case.get("classname", "").split(".")
        while len(parts) > 1 and not parts[-1].startswith("test_"):
            parts.pop()
        totals["/".join(parts) + ".py"] += float(case.get("time") or 0)
    return dict(totals)


def report(lanes: dict[str, dict[str, float]], top: int) -> list[str]:
    lines = []
    for lane, modules in lanes.items():
        ranked = sorted(modules.items(), key=lambda item: (-item[1], item[0]))
        shown = ", ".join(f"{pathlib.PurePath(m).stem} {s:.0f}" for m, s in ranked[:top])
        lines.append(f"{lane}: {sum(modules.values()):.0f}s in tests; {shown}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("lanes", nargs="+", metavar="NAME=FILE.xml")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    lanes = {}
    for pair in args.lanes:
        name, _, path = pair.partition("=")
        file = pathlib.Path(path)
        lanes[name] = module_seconds(file.read_text()) if file.is_file() and file.stat().st_size else {}
    print("\n".join(report(lanes, args.top)))


if __name__ == "__main__":
    main()
