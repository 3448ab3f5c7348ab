"""The kubectl-etcd plugin's pure views: member table, backup catalogue, restore choice.
The status views read EtcdClusters whose status the operator's own pure builder wrote."""

from __future__ import annotations

import datetime
import json

import pytest

from etcd_operator.core.cluster import quota
from etcd_operator.core.cluster.decision import plan
from etcd_operator.core.cluster.observed import Observed
from etcd_operator.core.cluster.recorded import ClusterStatus
from etcd_operator.core.cluster.spec import ClusterSpec
from etcd_operator.core.cluster.status import build_status
from etcd_operator_kubectl import views
from tests.unit.cluster_scenarios import CLUSTER, NAMESPACE, M, observed
from tests.unit.cluster_scenarios import NOW as NOW_SECONDS

NOW = datetime.datetime(2026, 11, 21, 12, 0, tzinfo=datetime.UTC)


MiB = 1024 * 1024


def operator_status(raw_spec: dict, seen: Observed, previous: dict) -> dict:
    """The status one reconcile pass writes, as the reconciler builds it: the pure decision,
    then status.build_status with the decision's own fields (quota, rollout...)."""
    spec, recorded = ClusterSpec.from_dict(raw_spec), ClusterStatus.from_dict(previous)
    decision = plan(spec, recorded, seen, NOW_SECONDS, stored_spec=raw_spec)
    conditions = list(decision.conditions)
    return build_status(
        spec,
        recorded,
        seen,
        NOW_SECONDS,
        decision.health,
        decision.action,
        conditions,
        previous,
        1,
        extra=decision.status_fields(),
    )


def cluster_after(raw_spec: dict, *passes: Observed, status: dict | None = None) -> dict:
    """The EtcdCluster as `kubectl get` returns it after the operator's passes over `passes`."""
    written = dict(status or {})
    for seen in passes:
        written = operator_status(raw_spec, seen, written)
    return {"metadata": {"name": CLUSTER, "namespace": NAMESPACE}, "spec": raw_spec, "status": written}


def members(*ms: M) -> list[M]:
    return list(ms)


RUNNING = members(M(0, db_size=208 * MiB), M(1, db_size=200 * MiB), M(2, db_size=204 * MiB))


def test_the_quota_shown_is_the_one_the_operator_derived_from_the_volume():
    """No quotaBackendBytes: the members run the quota derived from the 2Gi default volume,
    (2Gi - 384Mi) / 2, not etcd's 2 GiB default (2.5 times as much headroom)."""
    created = cluster_after({"size": 3}, observed([]), observed(RUNNING))
    derived = quota.quota_for_disk(2 * 1024 * MiB)
    assert created["status"]["quota"] == {"backendBytes": derived} == {"backendBytes": 832 * MiB}
    rows = views.member_rows(created)
    assert [r["quotaBytes"] for r in rows] == [derived] * 3
    text = views.status_table(views.status_view(created))
    assert "208.0MiB / 832.0MiB (25%)" in text and "quota 832.0MiB" in text


def test_an_explicit_quota_is_shown_as_set():
    created = cluster_after({"size": 3, "etcd": {"quotaBackendBytes": 64 * MiB}}, observed([]), observed(RUNNING))
    assert {r["quotaBytes"] for r in views.member_rows(created)} == {64 * MiB}


def test_a_cluster_that_kept_etcds_default_quota_shows_etcds_default():
    """Members created before quotas were derived: the operator records null (etcd's default)."""
    legacy = cluster_after({"size": 3}, observed(RUNNING), status={"clusterID": "1"})
    assert legacy["status"]["quota"] == {"backendBytes": None}
    assert {r["quotaBytes"] for r in views.member_rows(legacy)} == {2 * 1024 * MiB}


def test_before_the_operators_first_pass_the_quota_is_unknown():
    fresh = {"metadata": {"name": CLUSTER, "namespace": NAMESPACE}, "spec": {"size": 3}}
    view = views.status_view(fresh)
    assert view["quotaBytes"] is None and view["members"] == []
    assert "quota -" in views.status_table(view)


def test_alarms_are_shown_on_the_member_etcd_raised_them_for():
    nospace_on_c1 = observed(RUNNING, alarms=((M(1).id, "NOSPACE"),))
    alarmed = cluster_after({"size": 3}, observed([]), observed(RUNNING), nospace_on_c1)
    assert alarmed["status"]["alarms"] == [{"member": M(1).name, "memberID": f"{M(1).id:x}", "alarm": "NOSPACE"}]
    rows = {r["name"]: r["alarms"] for r in views.member_rows(alarmed)}
    assert rows == {M(0).name: [], M(1).name: ["NOSPACE"], M(2).name: []}
    text = views.status_table(views.status_view(alarmed))
    assert f"ALARMS RAISED: NOSPACE on {M(1).name}" in text
    assert "Alarm" in text and "NoSpace" in text  # the condition says the same


def test_an_alarm_of_a_member_no_longer_listed_is_still_shown():
    gone = 0x999
    corrupt = observed(RUNNING, alarms=((gone, "CORRUPT"),))
    alarmed = cluster_after({"size": 3}, observed([]), observed(RUNNING), corrupt)
    assert all(r["alarms"] == [] for r in views.member_rows(alarmed))
    assert "ALARMS RAISED: CORRUPT on 999" in views.status_table(views.status_view(alarmed))


def test_the_alarms_clear_once_etcd_no_longer_reports_them():
    raw = {"size": 3}
    alarmed = cluster_after(raw, observed([]), observed(RUNNING, alarms=((M(1).id, "NOSPACE"),)))
    cleared = cluster_after(raw, observed(RUNNING), status=alarmed["status"])
    assert cleared["status"]["alarms"] == []
    assert "ALARMS RAISED" not in views.status_table(views.status_view(cleared))


def test_member_rows_report_lag_against_the_most_advanced_member():
    lagging = members(M(0, applied=120), M(1, applied=100), M(2, healthy=False))
    created = cluster_after({"size": 3}, observed([]), observed(lagging))
    rows = {r["name"]: r for r in views.member_rows(created)}
    assert [rows[m.name]["revisionLag"] for m in lagging] == [0, 20, None]
    assert rows[M(0).name]["role"] == "leader" and rows[M(2).name]["healthy"] is False
    assert "Available" in views.status_table(views.status_view(created))


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
