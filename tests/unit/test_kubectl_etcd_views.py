"""The kubectl-etcd plugin's pure views: member table, backup catalogue, restore choice."""

from __future__ import annotations

import datetime
import json

import pytest

from etcd_operator_kubectl import views

NOW = datetime.datetime(2026, 11, 21, 12, 0, tzinfo=datetime.UTC)


def cluster(members, quota=None, alarms=None):
    spec = {"size": len(members), **({"etcd": {"quotaBackendBytes": quota}} if quota else {})}
    return {
        "metadata": {"name": "app", "namespace": "ns"},
        "spec": spec,
        "status": {
            "phase": "Running",
            "leader": "app-0",
            "members": members,
            **({"alarms": alarms} if alarms else {}),
            "conditions": [{"type": "Available", "status": "True", "reason": "Quorum", "message": "3/3"}],
        },
    }


def test_member_rows_report_lag_against_the_most_advanced_member_and_the_quota():
    rows = views.member_rows(
        cluster(
            [
                {
                    "name": "app-0",
                    "role": "Leader",
                    "healthy": True,
                    "revision": 120,
                    "dbSize": 1 << 20,
                    "version": "3.6.16",
                },
                {"name": "app-1", "role": "Follower", "healthy": False, "revision": 100, "dbSize": 2 << 20},
                {"name": "app-2", "role": "Learner"},
            ],
            quota=64 << 20,
            alarms=[{"member": "app-1", "alarm": "NOSPACE"}],
        )
    )
    assert [r["revisionLag"] for r in rows] == [0, 20, None]
    assert rows[0]["quotaBytes"] == 64 << 20
    assert rows[1]["alarms"] == ["NOSPACE"] and rows[0]["alarms"] == []
    text = views.status_table(
        views.status_view(
            cluster(
                [{"name": "app-0", "role": "Leader", "healthy": True, "revision": 1, "dbSize": 32 << 20}],
                quota=64 << 20,
            )
        )
    )
    assert "32.0MiB / 64.0MiB (50%)" in text and "Available" in text


def test_default_quota_is_etcds_own():
    assert views.member_rows(cluster([{"name": "a"}]))[0]["quotaBytes"] == 2 * 1024**3


def manifest(revision, slot, **extra):
    return json.dumps(
        {
            "format": "etcd-operator.snapshot/v1",
            "writer": "etcd-operator",
            "snapshotKey": f"p/ns/b/{slot}.db",
            "revision": revision,
            "size": 4096,
            "sha256": "ab" * 32,
            "createdAt": "2026-11-21T11:00:00Z",
            "clusterId": "c1",
            "etcdVersion": "3.6.16",
            **extra,
        }
    ).encode()


def test_manifests_without_verification_fields_are_shown_as_unknown_and_newer_fields_kept():
    plain = views.parse_manifest(manifest(5, "a"))
    assert plain.verification == "unknown" and plain.extra == {}
    richer = views.parse_manifest(
        manifest(
            6, "b", verification={"result": "Verified", "time": "2026-11-21T11:01:00Z"}, identity={"clusterUID": "u"}
        )
    )
    assert richer.verification == "Verified (2026-11-21T11:01:00Z)" and richer.extra == {
        "identity": {"clusterUID": "u"}
    }
    assert views.parse_manifest(b'{"format": "other"}') is None
    assert views.parse_manifest(b"not json") is None


def test_catalogue_orders_by_revision_from_manifests_not_by_key():
    entries = [views.parse_manifest(manifest(r, s)) for r, s in ((7, "z"), (9, "a"), (8, "m"))]
    assert [e.revision for e in views.catalogue(entries)] == [9, 8, 7]
    assert views.choose_backup(entries, None, None).revision == 9
    assert views.choose_backup(entries, 7, None).key == "p/ns/b/z.db"
    with pytest.raises(LookupError):
        views.choose_backup(entries, 42, None)
    assert "1h" in views.backups_table(entries, NOW)


def test_restore_object_names_the_chosen_snapshot_and_needs_one_target():
    entry = views.parse_manifest(manifest(7, "z"))
    obj = views.restore_object("ns", "r", "b", entry, "app", None, None)
    assert obj["spec"] == {
        "source": {"backupRef": {"name": "b", "key": "p/ns/b/z.db"}},
        "target": {"inPlace": {"clusterName": "app", "confirm": True}},
    }
    assert "INTO the existing cluster app" in views.restore_plan(obj, entry, NOW)
    with pytest.raises(ValueError):
        views.restore_object("ns", "r", "b", entry, "app", "new", None)
