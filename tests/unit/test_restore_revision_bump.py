"""Restores are safe under watch clients (issue 28): every restore pod bumps revisions by
spec.revisionBump, or without one by a bump chosen above what the target served (issue 41),
and marks them compacted (none when it is 0), the same on every member;
the backup verification pod never bumps; a bump into an etcd whose etcdutl cannot is refused
before anything is touched; an in-place restore whose bump does not lift revisions above what
the target served is refused before anything is touched; status records the snapshot's
revision, the bump, the revision the store starts from and the target's before."""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib

import pytest
import yaml

from etcd_operator.controllers.restore import executor
from etcd_operator.controllers.restore.observer import target_cluster
from etcd_operator.core import versions
from etcd_operator.core.backup.scratch_pod import verification_pod
from etcd_operator.core.backup.scratch_verdict import Expected
from etcd_operator.core.cluster.spec import ClusterSpec
from etcd_operator.core.outcome import Outcome
from etcd_operator.core.restore import builders
from etcd_operator.core.restore import steps as s
from etcd_operator.core.restore.observed import Observed, TargetCluster
from etcd_operator.core.restore.planner import plan
from etcd_operator.core.restore.spec import DEFAULT_REVISION_BUMP, RestoreSpec, RestoreStatus, spec_hash
from etcd_operator.core.restore.status import build_status

CRDS = pathlib.Path(__file__).resolve().parents[2] / "crds"
UID = "uid-of-this-restore"
NOW = 1_800_000_000.0
SOURCE = {"s3": {"bucket": "bk", "key": "ns/nightly/1.db"}}
VERIFIED = RestoreStatus(
    phase="Verifying", source_key="ns/nightly/1.db", sha256="ab" * 32, snapshot_version="3.5.0", restored_revision=100
)


def new_cluster(version: str = "3.6.16", **spec) -> dict:
    return {"source": SOURCE, "target": {"newCluster": {"name": "keep", "spec": {"version": version}}}, **spec}


def in_place(**spec) -> dict:
    return {"source": SOURCE, "target": {"inPlace": {"clusterName": "keep", "confirm": True}}, **spec}


def cluster(revision: int | None, version: str = "3.6.16") -> TargetCluster:
    """An in-place target that has served, with the highest member revision it recorded."""
    return TargetCluster(
        "keep",
        "cluster-uid",
        "42",
        ClusterSpec.from_dict({"size": 3, "version": version}),
        None,
        None,
        None,
        None,
        (),
        None,
        None,
        False,
        0,
        "Running",
        True,
        3,
        "c1d",
        revision=revision,
    )


def observed(target: TargetCluster | None = None) -> Observed:
    return Observed("ns", "r1", UID, 7, target)


def step_for(spec: dict, status: RestoreStatus, seen: Observed) -> s.Step:
    return plan(RestoreSpec.from_dict(spec), status, seen, NOW)


def restore_args(revision_bump: int, member: str = "c-0") -> list[str]:
    manifest = builders.restore_pod(
        "r",
        "ns",
        "c",
        member,
        ("c-0", "c-1", "c-2"),
        "tok",
        "etcd:v3.6.16",
        "op:1",
        {"bucket": "b"},
        "k.db",
        "ab" * 32,
        None,
        revision_bump=revision_bump,
    )
    [restore] = manifest["spec"]["containers"]
    assert restore["command"] == ["etcdutl"]
    return restore["args"]


# --- the restore pods -------------------------------------------------------------------


def test_every_restore_pod_bumps_the_same_and_marks_compacted():
    per_member = {m: restore_args(DEFAULT_REVISION_BUMP, m) for m in ("c-0", "c-1", "c-2")}
    for args in per_member.values():
        assert args[:2] == ["snapshot", "restore"]
        assert "--bump-revision=1000000000" in args and "--mark-compacted" in args
    bumps = {tuple(a for a in args if a.startswith(("--bump", "--mark"))) for args in per_member.values()}
    assert bumps == {("--bump-revision=1000000000", "--mark-compacted")}


def test_a_bump_of_0_passes_neither_flag():
    """etcdutl refuses --mark-compacted without a bump: 0 turns both off."""
    args = restore_args(0)
    assert not [a for a in args if a.startswith(("--bump-revision", "--mark-compacted"))]


def test_the_backup_verification_pod_never_bumps():
    """It compares the restored store with the source at the snapshot's revision."""
    pod = verification_pod(
        "b", "ns", "uid", "etcd:v3.6.0", "op:1", {"bucket": "bk"}, "p/x.db", "f" * 64, Expected(61, 60, 1234, None)
    )
    etcdutl = [c for c in pod["spec"]["initContainers"] if c.get("command") == ["etcdutl"]]
    assert len(etcdutl) == 1
    assert not [a for a in etcdutl[0]["args"] if a.startswith(("--bump-revision", "--mark-compacted"))]


class SeedRecorder:
    """Just enough of the Kubernetes client for StartSeedPods: the live target, the creates."""

    def __init__(self):
        self.created: list[dict] = []

    async def get(self, resource, namespace, name):
        return {"metadata": {"name": name, "uid": "cluster-uid"}}

    async def create(self, resource, namespace, manifest, dry_run=False):
        self.created.append(manifest)


@pytest.mark.parametrize("spec, recorded", [(in_place(), 2_000_000_001), (in_place(revisionBump=0), 0)])
def test_the_executor_builds_the_restore_pods_with_the_bump_recorded_when_the_restore_began(spec, recorded):
    kube_client = SeedRecorder()
    body = {"metadata": {"name": "r1", "namespace": "ns", "uid": UID}, "spec": spec}
    runner = executor.RestoreExecutor(kube_client, "op:1", body, lambda *_: None)
    status = dataclasses.replace(VERIFIED, phase="Restoring", seed_members=("keep-3", "keep-4"), revision_bump=recorded)
    step = s.StartSeedPods("seeding", members=("keep-3", "keep-4"))
    outcome = asyncio.run(runner.run(step, RestoreSpec.from_dict(spec), status, observed(cluster(500))))
    assert outcome.done and outcome.failure is None and len(kube_client.created) == 2
    for pod in kube_client.created:
        args = pod["spec"]["containers"][0]["args"]
        assert (f"--bump-revision={recorded}" in args) is (recorded > 0)
        assert ("--mark-compacted" in args) is (recorded > 0)


def test_no_restore_pod_is_built_before_the_bump_is_recorded():
    body = {"metadata": {"name": "r1", "namespace": "ns", "uid": UID}, "spec": in_place()}
    runner = executor.RestoreExecutor(SeedRecorder(), "op:1", body, lambda *_: None)
    status = dataclasses.replace(VERIFIED, phase="Restoring", seed_members=("keep-3",))
    with pytest.raises(RuntimeError, match="before its revision bump was recorded"):
        step = s.StartSeedPods("seeding", members=("keep-3",))
        asyncio.run(runner.run(step, RestoreSpec.from_dict(in_place()), status, observed(cluster(500))))


# --- the version gate -------------------------------------------------------------------


def test_the_first_etcd_with_the_bump_is_3_5_10():
    assert versions.REVISION_BUMP_SINCE == (3, 5, 10)
    assert versions.revision_bump_problem("3.5.9", 1) is not None
    for version in ("3.5.10", "3.5.21", "3.6.0", "3.6.16"):
        assert versions.revision_bump_problem(version, DEFAULT_REVISION_BUMP) is None
    assert versions.revision_bump_problem("3.5.9", 0) is None


@pytest.mark.parametrize("status", [RestoreStatus(), RestoreStatus(phase="Pending"), VERIFIED])
def test_a_bump_into_an_older_etcd_is_refused_before_anything_is_touched(status):
    """Refused on the first pass already (the target version is in the spec), before the
    snapshot is even read; the message names the version and both ways out."""
    step = step_for(new_cluster("3.5.9"), status, observed())
    assert isinstance(step, s.Fail) and step.code == "RevisionBumpUnsupported"
    assert "3.5.10" in step.reason and "spec.revisionBump: 0" in step.reason and "3.5.9" in step.reason
    step = step_for(in_place(), status, observed(cluster(50, version="3.5.9")))
    assert isinstance(step, s.Fail) and step.code == "RevisionBumpUnsupported"


def test_an_older_etcd_restores_without_a_bump():
    step = step_for(new_cluster("3.5.9", revisionBump=0), VERIFIED, observed())
    assert isinstance(step, s.BeginRestore) and step.revision_bump == 0
    assert isinstance(step_for(new_cluster("3.5.10"), VERIFIED, observed()), s.BeginRestore)


# --- in place: above what the target served -----------------------------------------------


@pytest.mark.parametrize("bump", [1, 300, 400])
def test_in_place_a_bump_that_does_not_lift_revisions_above_the_targets_is_refused(bump):
    """snapshot 100 + bump <= 500, the target's highest revision: refused, nothing touched."""
    step = step_for(in_place(revisionBump=bump), VERIFIED, observed(cluster(500)))
    assert isinstance(step, s.Fail) and step.code == "RevisionBumpTooSmall"
    assert "500" in step.reason and "spec.revisionBump" in step.reason and "0 if no client" in step.reason


@pytest.mark.parametrize("bump", [401, DEFAULT_REVISION_BUMP])
def test_in_place_a_bump_above_the_targets_revision_begins_and_records_it(bump):
    step = step_for(in_place(revisionBump=bump), VERIFIED, observed(cluster(500)))
    assert isinstance(step, s.BeginRestore)
    assert (step.revision_bump, step.bumped_revision, step.target_revision_before) == (bump, 100 + bump, 500)


def test_in_place_an_unknown_snapshot_revision_counts_as_0():
    status = dataclasses.replace(VERIFIED, restored_revision=None)
    step = step_for(in_place(revisionBump=500), status, observed(cluster(500)))
    assert isinstance(step, s.Fail) and step.code == "RevisionBumpTooSmall"


def test_in_place_without_a_reported_revision_only_the_default_bump_or_more_proceeds():
    step = step_for(in_place(revisionBump=DEFAULT_REVISION_BUMP - 1), VERIFIED, observed(cluster(None)))
    assert isinstance(step, s.Fail) and step.code == "TargetRevisionUnknown"
    assert str(DEFAULT_REVISION_BUMP) in step.reason
    step = step_for(in_place(), VERIFIED, observed(cluster(None)))
    assert isinstance(step, s.BeginRestore) and step.target_revision_before is None
    assert "reported no revision" in step.reason


# --- no spec.revisionBump: the restore chooses one ------------------------------------------


def test_a_second_in_place_restore_without_a_bump_chooses_one_above_what_the_target_served():
    """The target was restored before (its revisions bumped by 10^9 already), and is now restored
    from a snapshot of revision 201: the default alone (201 + 10^9) would not pass 1000000202."""
    status = dataclasses.replace(VERIFIED, restored_revision=201)
    explicit = step_for(in_place(revisionBump=DEFAULT_REVISION_BUMP), status, observed(cluster(1_000_000_202)))
    assert isinstance(explicit, s.Fail) and explicit.code == "RevisionBumpTooSmall"  # an explicit bump: as set
    step = step_for(in_place(), status, observed(cluster(1_000_000_202)))
    assert isinstance(step, s.BeginRestore)
    assert (step.revision_bump, step.bumped_revision) == (2_000_000_001, 2_000_000_202)
    assert "spec.revisionBump is not set: 2000000001 chosen" in step.reason and "1000000202" in step.reason
    written = build_status({"phase": "Verifying", "restoredRevision": 201}, step, Outcome(), 7, "2026-11-27T18:00:00Z")
    assert (written["revisionBump"], written["bumpedRevision"]) == (2_000_000_001, 2_000_000_202)
    assert "2000000001 chosen" in written["progress"]
    assert RestoreStatus.from_dict(written).revision_bump == 2_000_000_001


def test_the_chosen_bump_is_told_in_an_event_and_a_set_one_is_not():
    events: list[tuple[str, str, str]] = []
    body = {"metadata": {"name": "r1", "namespace": "ns", "uid": UID}, "spec": in_place()}
    runner = executor.RestoreExecutor(SeedRecorder(), "op:1", body, lambda *e: events.append(e))
    for spec in (in_place(), in_place(revisionBump=DEFAULT_REVISION_BUMP)):
        step = step_for(spec, VERIFIED, observed(cluster(500)))
        asyncio.run(runner.run(step, RestoreSpec.from_dict(spec), VERIFIED, observed(cluster(500))))
    chosen = [e for e in events if e[1] == "RevisionBumpChosen"]
    assert chosen == [
        ("Normal", "RevisionBumpChosen", step_for(in_place(), VERIFIED, observed(cluster(500))).bump_chosen)
    ]
    assert "1000000400 chosen" in chosen[0][2]


def test_a_new_cluster_without_a_bump_gets_the_default_above_the_snapshots_revision():
    step = step_for(new_cluster(), VERIFIED, observed())
    assert isinstance(step, s.BeginRestore) and step.revision_bump == DEFAULT_REVISION_BUMP
    assert step.bumped_revision == 100 + DEFAULT_REVISION_BUMP and "above the snapshot's revision 100" in step.reason


def test_in_place_a_bump_of_0_is_not_checked():
    """0 says no client watches the store: its revisions go back to the snapshot's."""
    step = step_for(in_place(revisionBump=0), VERIFIED, observed(cluster(500)))
    assert isinstance(step, s.BeginRestore) and step.revision_bump == 0 and step.target_revision_before == 500


def test_a_new_cluster_has_no_target_revision_to_check():
    step = step_for(new_cluster(revisionBump=1), VERIFIED, observed())
    assert isinstance(step, s.BeginRestore) and step.target_revision_before is None


def test_the_observer_reads_the_highest_member_revision_the_cluster_recorded():
    obj = {
        "metadata": {"name": "keep", "uid": "u"},
        "spec": {},
        "status": {"members": [{"name": "keep-0", "revision": 480}, {"name": "keep-1", "revision": 500}, {}]},
    }
    assert target_cluster(obj).revision == 500
    assert target_cluster({**obj, "status": {"members": [{"name": "keep-0"}]}}).revision is None
    assert target_cluster({**obj, "status": {}}).revision is None


# --- status -----------------------------------------------------------------------------


def test_status_records_the_source_revision_the_bump_and_the_start():
    previous = {"phase": "Verifying", "restoredRevision": 100}
    step = step_for(in_place(), VERIFIED, observed(cluster(500)))
    status = build_status(previous, step, Outcome(), 7, "2026-11-27T18:00:00Z")
    assert status["phase"] == "Restoring"
    assert status["restoredRevision"] == 100  # the snapshot's, unchanged
    assert status["revisionBump"] == 400 + DEFAULT_REVISION_BUMP  # chosen: 10^9 above the target's 500
    assert status["bumpedRevision"] == 500 + DEFAULT_REVISION_BUMP
    assert status["targetRevisionBefore"] == 500
    assert RestoreStatus.from_dict(status).target_revision_before == 500


def test_a_refusal_is_a_failed_condition_with_its_reason_and_generation():
    step = step_for(in_place(revisionBump=5), VERIFIED, observed(cluster(500)))
    status = build_status({"phase": "Verifying"}, step, Outcome(), 7, "2026-11-27T18:00:00Z")
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert status["phase"] == "Failed" and "targetCluster" not in status
    assert (failed["status"], failed["reason"], failed["observedGeneration"]) == ("True", "RevisionBumpTooSmall", 7)


# --- the CRD ----------------------------------------------------------------------------


def restore_schema() -> dict:
    crd = yaml.safe_load((CRDS / "etcdrestores.yaml").read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_the_crd_leaves_the_bump_unset_unless_given_and_refuses_a_negative_one():
    """No schema default: an unset bump must reach the operator unset, which then chooses one."""
    field = restore_schema()["properties"]["spec"]["properties"]["revisionBump"]
    assert field["type"] == "integer" and field["format"] == "int64"
    assert "default" not in field and field["minimum"] == 0
    assert versions.text(versions.REVISION_BUMP_SINCE) in field["description"]


def test_the_crd_lists_the_status_fields():
    status = restore_schema()["properties"]["status"]["properties"]
    for name in ("restoredRevision", "revisionBump", "bumpedRevision", "targetRevisionBefore"):
        assert status[name]["type"] == "integer", name


def test_the_default_bump_leaves_the_spec_digest_of_earlier_restores_unchanged():
    """A spec recorded on a cluster before the field existed is still recognised once the API
    server fills the default in; another bump is another spec."""
    before = in_place()
    assert spec_hash({**before, "revisionBump": DEFAULT_REVISION_BUMP}) == spec_hash(before)
    assert spec_hash({**before, "revisionBump": 0}) != spec_hash(before)
