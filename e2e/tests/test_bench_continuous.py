"""The continuous backup bench's pure parts: what a kill loses of the acknowledged writes,
given what the store holds, and the /proc readings (e2e/bench/continuous.py)."""

from __future__ import annotations

import os

import pytest

from bench.continuous import Ack, Loss, cpu_seconds, loss, losses_before_uploads, peak_rss_bytes

# revisions 11..20 acknowledged a tenth of a second apart, from t = 100
ACKS = [Ack(10 + i, 100 + i / 10) for i in range(1, 11)]


def test_nothing_is_lost_when_the_store_holds_the_newest_acknowledged_revision():
    assert loss(ACKS, 20) == Loss(0, 0.0)


def test_the_loss_runs_from_the_newest_stored_ack_to_the_newest_lost_ack():
    lost = loss(ACKS, 15)
    assert lost.writes == 5
    assert lost.seconds == pytest.approx(101.0 - 100.5)


def test_a_store_holding_none_of_the_load_loses_it_all_from_the_first_ack():
    lost = loss(ACKS, 3)
    assert lost.writes == 10
    assert lost.seconds == pytest.approx(101.0 - 100.1)


def test_acks_out_of_revision_order_are_counted_by_revision_and_never_lose_negative_time():
    acks = [Ack(12, 100.2), Ack(11, 100.3), Ack(13, 100.1)]
    assert loss(acks, 11) == Loss(2, 0.0)


def test_a_kill_just_before_each_upload_loses_what_was_acknowledged_since_the_previous_one():
    uploads = [(100.35, 13), (100.75, 17), (101.2, 20)]
    losses = losses_before_uploads(ACKS, uploads, until=200)
    # before the second upload: acks up to t < 100.75 (revision 17 at 100.7), 13 held (at 100.3)
    # before the third: acks up to revision 20 (at 101.0), 17 held (at 100.7)
    assert [x.writes for x in losses] == [4, 3]
    assert [x.seconds for x in losses] == [pytest.approx(0.4), pytest.approx(0.3)]


def test_uploads_after_the_kill_are_not_counted():
    uploads = [(100.35, 13), (100.75, 17), (101.2, 20)]
    assert len(losses_before_uploads(ACKS, uploads, until=101.0)) == 1


def test_cpu_seconds_read_utime_and_stime_even_with_a_paren_in_the_name():
    ticks = os.sysconf("SC_CLK_TCK")
    stat = f"42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 {3 * ticks} {2 * ticks} 0 0 20 0 1 0"
    assert cpu_seconds(stat) == 5.0


def test_peak_rss_is_vmhwm_in_bytes():
    assert peak_rss_bytes("Name:\tpython\nVmPeak:\t 9000 kB\nVmHWM:\t  2048 kB\nVmRSS:\t 1024 kB\n") == 2 << 20
