"""The scrape bench's pure part: its projection to 1,000 steady clusters (e2e/bench/scrape.py)."""

from __future__ import annotations

import pytest

from bench.scrape import cores_at_1000


def test_the_projection_counts_a_page_at_each_pass_of_a_quiet_cluster():
    # 30 ms a page once a minute (a quiet cluster's pass; the watcher's own interval is 30 s):
    # 0.5 ms of CPU per cluster per second
    assert cores_at_1000(0.030) == pytest.approx(0.5)
