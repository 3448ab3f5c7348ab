"""The figure the linearizability scenario reports per action: the longest time in a window
with no successful operation returning (tests/support/history.longest_gap)."""

from __future__ import annotations

import pytest

from tests.support.history import longest_gap


@pytest.mark.parametrize(
    "successes,start,end,gap",
    [
        ([], 0, 10, 10),  # nothing succeeded: the whole window
        ([5], 0, 10, 5),
        ([1, 2, 9], 0, 10, 7),  # between two successes
        ([4, 5], 0, 10, 5),  # from the last success to the window's end
        ([1, 2, 3, 50], 0, 10, 7),  # successes outside the window do not count
        ([-5, 0, 10, 20], 0, 10, 10),
    ],
)
def test_longest_gap(successes, start, end, gap):
    assert longest_gap(successes, start, end) == gap
