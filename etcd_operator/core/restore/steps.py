"""The steps the restore planner can ask for. Each is one small, idempotent change (or
none); the executor carries out exactly one per pass and returns an
etcd_operator.core.outcome.Outcome."""

from __future__ import annotations

import dataclasses

from etcd_operator.core.restore.point_in_time import ReplayRecord, ReplayResult


@dataclasses.dataclass(frozen=True)
class Step:
    reason: str = ""

    @property
    def kind(self) -> str:
        return type(self).__name__


# --- no change ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Idle(Step):
    """The restore has ended (Completed, Failed, AlreadyApplied): nothing more, ever."""


@dataclasses.dataclass(frozen=True)
class Wait(Step):
    """Nothing safe to do yet; look again soon. `code` is the Progressing reason."""

    code: str = "Waiting"


# --- status only: the end of a restore ----------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Fail(Step):
    """Stop for good with a reason. Nothing further is touched."""

    code: str = ""


@dataclasses.dataclass(frozen=True)
class SkipAlreadyApplied(Step):
    """This very restore (name and spec) was already applied to the target: do nothing."""

    applied_at: str = ""


@dataclasses.dataclass(frozen=True)
class Complete(Step):
    cluster_id: str = ""
    ready: int = 0
    size: int = 0


# --- before anything is touched ---------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class StartVerifying(Step):
    """Record the start (phase Verifying)."""


@dataclasses.dataclass(frozen=True)
class VerifySnapshot(Step):
    """Resolve the source, stream it (sha256 against the manifest, etcd's own checksum),
    read its storage version. Reads only."""

    key: str = ""  # a point-in-time restore's snapshot (the replayed one, or the base); "": the source's


# --- point in time: the replay, before anything of the target is touched -----------------


@dataclasses.dataclass(frozen=True)
class PlanReplay(Step):
    """Record the base snapshot and the segments to replay (status.pointInTime), once."""

    record: ReplayRecord | None = None
    ignored: str = ""  # the manifests the plan left out (they did not authenticate), for a Warning event


@dataclasses.dataclass(frozen=True)
class StartReplayPod(Step):
    """Create the one-shot replay pod (core/restore/replay_pod.py): the base snapshot restored
    on its scratch space, the segments replayed onto it, its snapshot uploaded."""


@dataclasses.dataclass(frozen=True)
class RecordReplayResult(Step):
    """The replay pod ended well: record the revision and time it reached."""

    result: ReplayResult | None = None


@dataclasses.dataclass(frozen=True)
class RemoveReplayPod(Step):
    pod: str = ""
    pod_uid: str = ""


@dataclasses.dataclass(frozen=True)
class FailReplay(Fail):
    """The replay refused or failed: remove its pod (its scratch etcd would run on) and fail."""

    pod: str = ""
    pod_uid: str = ""


@dataclasses.dataclass(frozen=True)
class BeginRestore(Step):
    """Every check passed: record the target (phase Restoring), the revision bump, the
    revision the restored store starts from, and (in place) the highest revision the target
    reported before it is stopped. From here on the target is changed, one step at a time."""

    target: str = ""
    revision_bump: int = 0
    bump_chosen: str = ""  # why this bump, when spec.revisionBump did not set it; "" when it did
    bumped_revision: int | None = None  # the snapshot's revision + revision_bump
    target_revision_before: int | None = None


# --- the target -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CreateTargetCluster(Step):
    """newCluster: create the EtcdCluster, held by this restore."""


@dataclasses.dataclass(frozen=True)
class HoldCluster(Step):
    """inPlace: mark the EtcdCluster as held, so its controller stops acting on it."""


@dataclasses.dataclass(frozen=True)
class ClearQuorumRecovery(Step):
    """inPlace: a quorum recovery recorded for the old data must not resume over the
    restored data. The approval annotation is removed here; status.operation belongs to the
    cluster's controller, which drops it on every pass that sees this restore's hold
    (cluster/status.py), so the restore only waits until it observes it gone."""

    clear_operation: bool = False  # status.operation is still recorded: wait for its owner
    clear_approval: bool = False  # remove the approve-quorum-recovery annotation


@dataclasses.dataclass(frozen=True)
class StopMembers(Step):
    """inPlace: delete the member pods (their data stays on the PVCs)."""

    pods: tuple[tuple[str, str], ...] = ()  # (name, uid)


@dataclasses.dataclass(frozen=True)
class RecordPreservedData(Step):
    """inPlace: write the PVCs about to be set aside into status, before they move."""

    pvcs: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class SetAsideData(Step):
    """inPlace: relabel the old PVCs so that no member uses them; they are kept."""

    pvcs: tuple[tuple[str, str], ...] = ()  # (name, uid)


@dataclasses.dataclass(frozen=True)
class ChooseMembers(Step):
    """Name the members whose data directories are restored, every member of the target
    at once; in place, members below the first ordinal are never created again (their
    data is set aside)."""

    members: tuple[str, ...] = ()
    min_ordinal: int = 0


@dataclasses.dataclass(frozen=True)
class CreateSeedVolumes(Step):
    """Create the members' PVCs, each marked as this restore's own."""

    members: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class StartSeedPods(Step):
    """One restore pod per member, all at once: fetch the verified snapshot onto scratch
    space, check its sha256 again, run etcdutl snapshot restore with the member's name,
    the full initial cluster and this restore's token."""

    members: tuple[str, ...] = ()
    tls: bool = False  # the members' peer URLs are https (restore.planner.peer_tls)


@dataclasses.dataclass(frozen=True)
class MarkSeedsRestored(Step):
    """Restore pods succeeded: mark their PVCs so that no member is restored twice, and
    record when each pod was created and ran (member, created, started, finished)."""

    pvcs: tuple[str, ...] = ()
    timings: tuple[tuple[str, str, str, str], ...] = ()


@dataclasses.dataclass(frozen=True)
class RetrySeedPod(Step):
    pod: str = ""
    pod_uid: str = ""
    attempt: int = 0


@dataclasses.dataclass(frozen=True)
class RemoveSeedPods(Step):
    pods: tuple[tuple[str, str], ...] = ()  # (name, uid)


@dataclasses.dataclass(frozen=True)
class ReleaseCluster(Step):
    """Hand the restored data to the cluster and record, on the cluster itself, that this
    restore was applied (one patch)."""

    records: str = ""  # the new value of the restored-from annotation


@dataclasses.dataclass(frozen=True)
class ReleaseHold(Step):
    """The EtcdRestore is being deleted before it stopped or set aside anything: take its
    hold off the target, which then goes on as before."""


ALL_STEPS: tuple[type[Step], ...] = (
    Idle,
    Wait,
    Fail,
    SkipAlreadyApplied,
    Complete,
    StartVerifying,
    VerifySnapshot,
    PlanReplay,
    StartReplayPod,
    RecordReplayResult,
    RemoveReplayPod,
    FailReplay,
    BeginRestore,
    CreateTargetCluster,
    HoldCluster,
    ClearQuorumRecovery,
    StopMembers,
    RecordPreservedData,
    SetAsideData,
    ChooseMembers,
    CreateSeedVolumes,
    StartSeedPods,
    MarkSeedsRestored,
    RetrySeedPod,
    RemoveSeedPods,
    ReleaseCluster,
    ReleaseHold,
)
