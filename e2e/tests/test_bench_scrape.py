"""The scrape bench's pure part: its projection to 1,000 steady clusters (e2e/bench/scrape.py)."""

from __future__ import annotations

import pytest

from bench.scrape import cores_at_1000


def test_the_projection_counts_a_page_every_scrape_interval_and_the_version_gauge_every_steady_poll():
    # 30 ms a page every 30 s and 1.5 ms a version read every 15 s: 1.1 ms of CPU per cluster per second
    assert cores_at_1000(0.030, 0.0015) == pytest.approx(1.1)
