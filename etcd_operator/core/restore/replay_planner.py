"""Decides the next step of a point-in-time restore's replay, before anything of the target
is touched. Pure.

Invariants, each covered by tests/unit/test_restore_point_in_time.py:
- the plan (the base snapshot, the chain and its segments, the revision to reach) is chosen
  once, from the manifests listed (core/backup/chain.py), and recorded in status.pointInTime
  before anything is created; later passes follow the record, so segments that arrive
  meanwhile change nothing, "latest" included;
- a point no chain reaches fails the restore before anything is created (PointNotReachable,
  with the chain's own reason); a store that cannot be listed makes it wait, or fail when
  listing again cannot help (StorageError);
- with the restore's keys, only manifests that authenticate under them are planned with
  (the observer leaves the others out); those left out are named in the step's message;
- a base snapshot that is the point itself replays nothing: it is verified and restored as is;
- the plan records etcd's auth revision of its base and of the first segment cut at or after
  the point (for a time, one holding a revision seen after it; none after the last cut); a
  base whose auth state may not be the point's (they differ, or either was not recorded) is
  replayed and restored all the same, and said so: AuthStateAtTarget False or Unknown, reason
  AuthStateFromBase, and a Warning event (point_in_time.auth_condition; tested in
  tests/unit/test_auth_revision_chain.py);
- only a replay pod this restore owns is read or removed; another pod of its name fails the
  restore (ReplayPodNameTaken) and is left alone;
- the replayed snapshot is verified only after the replay's result is recorded and its pod
  removed; a replay that refused (a segment differs from its manifest, a gap, a revision
  that did not line up) or failed fails the restore, naming why, and its pod is removed.
"""

from __future__ import annotations

from etcd_operator.core.backup.chain import ChainProblem, plan_replay
from etcd_operator.core.backup.manifest import ignored_summary
from etcd_operator.core.restore import steps as s
from etcd_operator.core.restore.observed import Observed
from etcd_operator.core.restore.point_in_time import (
    ReplayRecord,
    ReplayResult,
    describe,
    init_failure_reason,
    replay_failure_reason,
    replay_key,
)
from etcd_operator.core.restore.spec import RestoreSpec, RestoreStatus


def plan_point_in_time(spec: RestoreSpec, status: RestoreStatus, observed: Observed) -> s.Step | None:
    """The next step of the replay; None once the snapshot to verify is known
    (status.pointInTime's snapshot_key)."""
    record = status.point_in_time
    if record is None:
        return _choose(spec, observed)
    if not record.replays:
        return None
    pod = observed.replay_pod
    if record.replayed:
        if pod is not None and pod.owned and not pod.deleting:
            return s.RemoveReplayPod(
                f"revision {record.reached_revision} replayed; removing the replay pod", pod=pod.name, pod_uid=pod.uid
            )
        return None
    if pod is None:
        return s.StartReplayPod(
            f"replaying {record.segments} segments of chain {record.chain} onto {record.base_key} "
            f"(revision {record.base_revision}), up to {record.target}"
        )
    if not pod.owned:
        return s.Fail(f"pod {pod.name} exists and does not belong to this restore", code="ReplayPodNameTaken")
    if pod.deleting:
        return s.Wait(f"waiting for the earlier replay pod {pod.name} to go", code="Replaying")
    if pod.init_failure is not None:
        end = pod.init_failure
        return s.FailReplay(
            f"the replay pod's {end.container} exited with {end.exit_code}: {end.message or 'see its logs'}",
            code=init_failure_reason(end.container, end.exit_code),
            pod=pod.name,
            pod_uid=pod.uid,
        )
    if pod.replay is not None:
        end = pod.replay
        if end.exit_code != 0:
            return s.FailReplay(
                end.message or f"the replay exited with {end.exit_code}",
                code=replay_failure_reason(end.exit_code),
                pod=pod.name,
                pod_uid=pod.uid,
            )
        try:
            result = ReplayResult.from_json(end.message)
        except ValueError as e:
            return s.FailReplay(
                f"the replay pod ended without a readable result ({e})",
                code="ReplayFailed",
                pod=pod.name,
                pod_uid=pod.uid,
            )
        return s.RecordReplayResult(
            f"replayed {result.applied} revisions onto revision {record.base_revision}: reached revision "
            f"{result.revision}",
            result=result,
        )
    if pod.phase == "Failed":
        return s.FailReplay(f"the replay pod {pod.name} failed", code="ReplayFailed", pod=pod.name, pod_uid=pod.uid)
    return s.Wait(f"replaying up to {record.target} in pod {pod.name}", code="Replaying")


def _choose(spec: RestoreSpec, observed: Observed) -> s.Step:
    point, catalogue = spec.point, observed.catalogue
    if point is None:
        raise RuntimeError(f"a replay for {observed.restore} was planned without spec.source.pointInTime")
    if catalogue is None:
        return s.Wait(f"listing EtcdBackup {spec.backup}'s snapshots and segments", code="Replaying")
    if catalogue.error:
        if catalogue.permanent:
            return s.Fail(f"the backup's store cannot be listed: {catalogue.error}", code="StorageError")
        return s.Wait(f"the backup's store cannot be listed now: {catalogue.error}", code="StorageUnavailable")
    left_out = f"; {ignored_summary(catalogue.ignored)}" if catalogue.ignored else ""
    try:
        plan = plan_replay(point, catalogue.snapshots, catalogue.segments, catalogue.caught_up)
    except ChainProblem as e:
        return s.Fail(
            f"{describe(point)} cannot be reached from EtcdBackup {spec.backup}: {e}{left_out}",
            code="PointNotReachable",
        )
    record = ReplayRecord.of_plan(point, plan, replay_key(catalogue.folder, observed.uid), catalogue.auth_read)
    if not record.replays:
        why = f"full snapshot {record.base_key} is at revision {record.base_revision}: nothing to replay"
    else:
        why = (
            f"base {record.base_key} (revision {record.base_revision}), then {record.segments} segments of "
            f"chain {record.chain} up to revision {plan.up_to_revision}"
            + (f", revisions seen by {describe(point).removeprefix('time ')}" if plan.until_time is not None else "")
        )
    summary = ignored_summary(catalogue.ignored) if catalogue.ignored else ""
    return s.PlanReplay(f"{record.target}: {why}{left_out}", record=record, ignored=summary)
