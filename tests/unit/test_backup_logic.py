"""Pure backup logic: schedules with catch-up, retention by manifest, manifests."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from etcd_operator.core.backup import retention, schedule
from etcd_operator.core.backup.manifest import Manifest, manifest_key, snapshot_key

UTC = datetime.UTC
T0 = datetime.datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)


def at(minutes: float) -> datetime.datetime:
    return T0 + datetime.timedelta(minutes=minutes)


def test_first_run_waits_for_the_first_slot_after_creation():
    due = schedule.due("*/10 * * * *", None, at(1), at(5))
    assert due.slot is None and due.next_slot == at(10)


def test_a_due_slot_runs_once():
    due = schedule.due("*/10 * * * *", None, at(1), at(10.5))
    assert due.slot == at(10) and due.next_slot == at(20)
    again = schedule.due("*/10 * * * *", due.slot, at(1), at(10.6))
    assert again.slot is None


def test_many_missed_slots_give_exactly_one_catch_up_run_for_the_latest():
    due = schedule.due("*/10 * * * *", at(10), at(1), at(75))
    assert due.slot == at(70) and due.next_slot == at(80)
    assert schedule.due("*/10 * * * *", due.slot, at(1), at(75)).slot is None


def test_seconds_field_for_short_schedules():
    due = schedule.due("* * * * * */5", at(0), at(0), at(0) + datetime.timedelta(seconds=6))
    assert due.slot == at(0) + datetime.timedelta(seconds=5)


@given(st.lists(st.floats(0.5, 500), min_size=1, max_size=30))
def test_no_slot_ever_runs_twice(wakeups):
    last, ran = None, []
    now = at(0)
    for step in sorted(wakeups):
        now = at(step)
        due = schedule.due("*/7 * * * *", last, at(0), now)
        if due.slot:
            ran.append(due.slot)
            last = due.slot
    assert len(ran) == len(set(ran)) and ran == sorted(ran)


def manifest(minutes: float, revision: int, key: str | None = None) -> Manifest:
    created = at(minutes).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Manifest(
        key or f"p/ns/b/{minutes}.db",
        "b",
        "ns",
        "c",
        "1",
        "3.6.16",
        revision,
        10,
        "x" * 64,
        created,
        "c-1",
        str(minutes),
    )


def store_times(backups: list[Manifest], now: datetime.datetime) -> retention.StoreTimes:
    """The store's clock agreeing with the writers'."""
    return retention.StoreTimes(
        now, {b.snapshot_key: datetime.datetime.fromisoformat(b.created_at.replace("Z", "+00:00")) for b in backups}
    )


def test_retention_orders_by_revision_not_by_name():
    # Key names that sort the wrong way (the revision gained a digit): coreos/etcd-operator#2113.
    old = manifest(0, 999, "p/ns/b/r999.db")
    new = manifest(10, 1000, "p/ns/b/r1000.db")
    doomed = retention.expired([old, new], max_backups=1, max_age_seconds=None, now=at(11), history=("1",))
    assert doomed == [old]


def test_retention_never_deletes_the_newest_backup_even_when_everything_is_too_old():
    backups = [manifest(0, 1), manifest(5, 2)]
    doomed = retention.expired(
        backups,
        max_backups=None,
        max_age_seconds=60,
        now=at(1000),
        history=("1",),
        store=store_times(backups, at(1000)),
    )
    assert doomed == [backups[0]]


@given(
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 10**9)), min_size=1, max_size=40, unique=True),
    st.one_of(st.none(), st.integers(1, 10)),
    st.one_of(st.none(), st.floats(1, 10**6)),
)
def test_retention_properties(entries, max_backups, max_age):
    backups = [manifest(m, r, f"p/ns/b/{i}.db") for i, (m, r) in enumerate(entries)]
    doomed = retention.expired(
        backups, max_backups, max_age, now=at(20_000), history=("1",), store=store_times(backups, at(20_000))
    )
    newest = retention.newest_first(backups, ("1",))[0]
    assert newest not in doomed
    kept = [b for b in backups if b not in doomed]
    if max_backups is not None:
        assert len(kept) <= max(max_backups, 1)


def test_manifest_round_trip_and_refuses_foreign_documents():
    original = manifest(3, 42)
    assert Manifest.from_json(original.to_json()) == original
    with pytest.raises(ValueError):
        Manifest.from_json(b'{"format": "something-else"}')
    with pytest.raises(ValueError):
        Manifest.from_json(b"not json")


def test_keys_stay_under_the_backups_own_prefix():
    key = snapshot_key("/team/etcd/", "prod", "nightly", "20261121T120000Z")
    assert key == "team/etcd/prod/nightly/20261121T120000Z.db"
    assert manifest_key(key) == "team/etcd/prod/nightly/20261121T120000Z.manifest.json"


@given(st.binary(max_size=4000), st.lists(st.integers(1, 700), max_size=40), st.booleans())
def test_snapshot_digest_checks_etcds_trailer_and_hashes_the_whole_stream(db, cuts, corrupt):
    import hashlib

    from etcd_operator.core.backup.digest import SnapshotDigest

    stream = bytearray(db + hashlib.sha256(db).digest())
    if corrupt:
        stream[len(stream) // 2] ^= 0xFF
    digest, start = SnapshotDigest(), 0
    for size in cuts + [len(stream)]:
        digest.update(bytes(stream[start : start + size]))
        start += size
    assert digest.size == len(stream)
    assert digest.sha256 == hashlib.sha256(stream).hexdigest()
    assert digest.etcd_checksum_matches is not corrupt
