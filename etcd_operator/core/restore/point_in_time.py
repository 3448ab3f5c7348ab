"""Point-in-time restore, its values: the point spec.source.pointInTime names, what the
restore records of its replay (status.pointInTime), where the replayed snapshot is stored,
and how the replay pod reports (its exit code and result). Pure.

A point is a revision, a time (as the backup's watch saw revisions arrive: segments record
`seen_at` for each) or the latest revision backed up. The restore takes the newest full
snapshot it can reach the point from (core/backup/chain.py), replays the segments after it
in a one-shot pod (core/restore/replay_pod.py, programs/replay.py), and restores the
snapshot of the replayed store as it would any other."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from etcd_operator.core import conditions as c
from etcd_operator.core.backup.chain import CaughtUp, ChainProblem, ReplayPlan, Target, runs
from etcd_operator.core.backup.continuous import AuthRead
from etcd_operator.core.backup.scratch_verdict import SHA256_REFUSED, UNSEALING_REFUSED
from etcd_operator.core.backup.segments import SegmentManifest
from etcd_operator.core.timefmt import format_precise_time, parse_time

POINT_FIELD = "pointInTime"
REPLAY_FOLDER = "restores"  # under the backup's prefix; read_manifests never reads deeper folders
REPLAYED_SNAPSHOT = "replayed.db"
RESULT_SUFFIX = ".result.json"


def target_of(source: Mapping[str, Any]) -> Target | None:
    """The point spec.source.pointInTime names; None for a restore of a whole snapshot."""
    point = source.get(POINT_FIELD)
    if point is None:
        return None
    if point.get("revision") is not None:
        return Target(revision=int(point["revision"]))
    if point.get("time"):
        return Target(time=parse_time(point["time"]))
    return Target()


def caught_up_of(backup_status: Mapping[str, Any] | None) -> tuple[CaughtUp, ...]:
    """The writer's record of holding the whole cluster, from an EtcdBackup's status
    (status.continuous.caughtUp); () when there is none or it cannot be read."""
    record = ((backup_status or {}).get("continuous") or {}).get("caughtUp") or {}
    try:
        moment = parse_time(record.get("time"))
        if moment is None or not record.get("chain"):
            return ()
        return (CaughtUp(str(record["chain"]), int(record["revision"]), moment),)
    except (KeyError, TypeError, ValueError):
        return ()


def auth_read_of(backup_status: Mapping[str, Any] | None) -> AuthRead | None:
    """The writer's newest auth revision reading, from an EtcdBackup's status
    (status.continuous.authRead); None when there is none."""
    return AuthRead.from_dict(((backup_status or {}).get("continuous") or {}).get("authRead"))


def describe(target: Target) -> str:
    """The point, for people, a time in RFC 3339."""
    if target.time is not None and target.revision is None:
        return f"time {format_precise_time(target.time)}"
    return target.describe()


def replay_key(backup_folder: str, restore_uid: str) -> str:
    """Where a restore stores its replayed snapshot, in the folder of the backup it replays
    (manifest.backup_prefix): one key per restore object, so a pass after a restart finds
    what an earlier pass's pod uploaded. Retention and "the latest backup" read only the
    backup's own folder, never this one below it."""
    return f"{backup_folder}{REPLAY_FOLDER}/{restore_uid}/{REPLAYED_SNAPSHOT}"


def result_key(snapshot_key: str) -> str:
    """The replay's result, uploaded last: its presence means snapshot and manifest are complete."""
    return snapshot_key + RESULT_SUFFIX


@dataclasses.dataclass(frozen=True)
class ReplayResult:
    """What the replay reached; the replay pod's termination message, as JSON."""

    revision: int
    seen_at: float | None  # when the backup's watch saw that revision; None: no revision was replayed
    applied: int  # revisions applied on top of the base snapshot
    sha256: str  # of the replayed snapshot uploaded
    size: int

    def to_json(self) -> str:
        return json.dumps(
            {
                "revision": self.revision,
                "seenAt": self.seen_at,
                "applied": self.applied,
                "sha256": self.sha256,
                "size": self.size,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> ReplayResult:
        """Raises ValueError for anything the replay program did not write."""
        try:
            body = json.loads(text)
            seen_at = body["seenAt"]
            return cls(
                int(body["revision"]),
                None if seen_at is None else float(seen_at),
                int(body["applied"]),
                str(body["sha256"]),
                int(body["size"]),
            )
        except (TypeError, ValueError, KeyError) as e:
            raise ValueError(f"not a replay result: {e}") from None


@dataclasses.dataclass(frozen=True)
class ReplayRecord:
    """status.pointInTime: the plan, recorded once (a later pass replays the same segments
    even when newer ones arrived), and what the replay reached."""

    target: str  # the point, for people: "revision 42", "time ...", "the latest revision"
    base_key: str
    base_revision: int
    base_etcd_version: str
    base_sha256: str = ""
    chain: str = ""  # "" when the base snapshot is the point: nothing to replay
    first_sequence: int = 0
    last_sequence: int = 0
    segments: int = 0
    up_to_revision: int = 0
    replayed_key: str = ""  # where the replayed snapshot goes; "" when nothing is replayed
    reached_revision: int | None = None
    reached_time: str | None = None  # RFC 3339 with milliseconds: when the backup's watch saw it
    applied: int | None = None
    # etcd's auth revision recorded with the base snapshot, and with the segment cut at or after
    # the point (ReplayPlan.auth_witness, its sequence); None: not recorded, or no such segment.
    base_auth_revision: int | None = None
    target_auth_revision: int | None = None
    target_auth_segment: int | None = None
    # When no segment was cut after a time target: when the backup's writer read
    # target_auth_revision (status.continuous.authRead, at or after the point).
    target_auth_read_time: str | None = None
    base_is_point: bool = False  # a full snapshot is the point (a revision, or the latest): nothing after it counts

    @property
    def replays(self) -> bool:
        return self.segments > 0

    @property
    def replayed(self) -> bool:
        return self.reached_revision is not None

    @property
    def snapshot_key(self) -> str:
        """The snapshot the restore verifies and seeds its members from."""
        return self.replayed_key if self.replays else self.base_key

    @classmethod
    def of_plan(
        cls, target: Target, plan: ReplayPlan, replayed_key: str, auth_read: AuthRead | None = None
    ) -> ReplayRecord:
        """`auth_read`: the backup's writer's newest auth reading, which stands for the point's
        auth state when no segment was cut after a time target and it was read after the time."""
        base, witness = plan.base, plan.auth_witness
        # (etcd's auth revision at the point, the sequence of the segment it was read with)
        read: tuple[int | None, int | None] = (base.auth_revision, None)
        read_time = None
        if plan.replays or target.time is not None:  # else the snapshot is the point; a time may be after it
            read = (None, None) if witness is None else (witness.auth_revision, witness.sequence)
            after = _read_after(auth_read, base.cluster_id, target.time) if witness is None else None
            if after is not None:
                read, read_time = (after.auth_revision, None), after.time
        record = cls(
            describe(target),
            base.snapshot_key,
            base.revision,
            base.etcd_version,
            base.sha256,
            reached_revision=None if plan.replays else base.revision,  # a replay records its own
            base_auth_revision=base.auth_revision,
            target_auth_revision=read[0],
            target_auth_segment=read[1],
            target_auth_read_time=None if read_time is None else format_precise_time(read_time),
            base_is_point=not plan.replays and target.time is None,
        )
        if not plan.replays:
            return record
        return dataclasses.replace(
            record,
            chain=plan.segments[0].chain,
            first_sequence=plan.segments[0].sequence,
            last_sequence=plan.segments[-1].sequence,
            segments=len(plan.segments),
            up_to_revision=plan.up_to_revision,
            replayed_key=replayed_key,
        )

    def with_result(self, result: ReplayResult) -> ReplayRecord:
        return dataclasses.replace(
            self,
            reached_revision=result.revision,
            reached_time=None if result.seen_at is None else format_precise_time(result.seen_at),
            applied=result.applied,
        )

    def to_dict(self) -> dict[str, Any]:
        fields = {
            "target": self.target,
            "baseKey": self.base_key,
            "baseRevision": self.base_revision,
            "baseEtcdVersion": self.base_etcd_version,
            "baseSha256": self.base_sha256,
            "chain": self.chain,
            "firstSequence": self.first_sequence,
            "lastSequence": self.last_sequence,
            "segments": self.segments,
            "upToRevision": self.up_to_revision,
            "replayedKey": self.replayed_key,
            "reachedRevision": self.reached_revision,
            "reachedTime": self.reached_time,
            "revisionsApplied": self.applied,
            "baseAuthRevision": self.base_auth_revision,
            "targetAuthRevision": self.target_auth_revision,
            "targetAuthSegment": self.target_auth_segment,
            "targetAuthReadTime": self.target_auth_read_time,
            "baseIsThePoint": self.base_is_point,
        }
        return {k: v for k, v in fields.items() if v not in (None, "")}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> ReplayRecord | None:
        if not data or "baseKey" not in data:
            return None
        return cls(
            target=str(data.get("target") or ""),
            base_key=str(data["baseKey"]),
            base_revision=int(data.get("baseRevision") or 0),
            base_etcd_version=str(data.get("baseEtcdVersion") or ""),
            base_sha256=str(data.get("baseSha256") or ""),
            chain=str(data.get("chain") or ""),
            first_sequence=int(data.get("firstSequence") or 0),
            last_sequence=int(data.get("lastSequence") or 0),
            segments=int(data.get("segments") or 0),
            up_to_revision=int(data.get("upToRevision") or 0),
            replayed_key=str(data.get("replayedKey") or ""),
            reached_revision=data.get("reachedRevision"),
            reached_time=data.get("reachedTime"),
            applied=data.get("revisionsApplied"),
            base_auth_revision=data.get("baseAuthRevision"),
            target_auth_revision=data.get("targetAuthRevision"),
            target_auth_read_time=data.get("targetAuthReadTime"),
            **_auth_witness_of(data),
        )


def _read_after(auth_read: AuthRead | None, cluster_id: str, moment: float | None) -> AuthRead | None:
    """The writer's auth reading when it is of `cluster_id` and was sent at or after `moment`:
    the auth state at the moment is at or below its revision (auth revisions only grow)."""
    if auth_read is None or moment is None or auth_read.time is None or auth_read.time < moment:
        return None
    return auth_read if auth_read.of(cluster_id) is not None else None


def _auth_witness_of(data: Mapping[str, Any]) -> dict[str, Any]:
    if "baseIsThePoint" in data:
        return {"target_auth_segment": data.get("targetAuthSegment"), "base_is_point": bool(data["baseIsThePoint"])}
    # Recorded by an operator before these: the last segment replayed was read, and nothing
    # replayed meant the base was the point.
    segments = int(data.get("segments") or 0)
    return {"target_auth_segment": data.get("lastSequence") if segments else None, "base_is_point": not segments}


AUTH_CONDITION = "AuthStateAtTarget"
AUTH_FROM_BASE = "AuthStateFromBase"
_AUTH_REAPPLIED = (
    "etcd's auth changes are not in the segments, so the restored cluster holds the base's users, roles and "
    "auth switch; once it runs, the operator applies spec.auth again (declared users and roles as declared, "
    "declared passwords set again from their Secrets), while users and roles not declared stay as in the base"
)


def auth_condition(record: ReplayRecord) -> c.Condition:
    """Whether the restored auth state (users, roles, the auth switch: the base snapshot's)
    is the target's, by the auth revisions recorded with the base and with the first segment
    cut at or after the point (or, for a time after the last cut, with the writer's auth reading
    sent after it). True when they match or the base is the point; False when they differ;
    Unknown when either was not recorded, or nothing read auth after a time target (the data
    is restored either way)."""
    if record.base_is_point:
        return c.Condition(AUTH_CONDITION, True, "BaseIsThePoint", f"{record.base_key} is the point itself")
    base, target = record.base_auth_revision, record.target_auth_revision
    if base is not None and base == target:
        return c.Condition(
            AUTH_CONDITION,
            True,
            "AuthUnchanged",
            f"etcd's auth revision is {base} at the base snapshot and at {record.target}: users and roles are as at "
            "the point",
        )
    if record.target_auth_read_time is not None:
        read = (
            f"read by the backup's writer at {record.target_auth_read_time}, after the point "
            "(no segment was cut after it)"
        )
    elif record.target_auth_segment is None:
        read = "read at or after the point: no segment was cut after it"
    else:
        of_chain = f" of chain {record.chain}" if record.chain else ""
        read = f"read when segment {record.target_auth_segment}{of_chain} was cut, at or after the point"
    named = (
        f"auth revision {_auth_text(base)} recorded with base snapshot {record.base_key}, auth revision "
        f"{_auth_text(target)} {read} ({record.target})"
    )
    known = base is not None and target is not None
    return c.Condition(AUTH_CONDITION, False if known else None, AUTH_FROM_BASE, f"{named}: {_AUTH_REAPPLIED}")


def _auth_text(revision: int | None) -> str:
    return "none (not recorded)" if revision is None else str(revision)


# The replay container's exit code names why it refused; 0: replayed. SHA256_REFUSED is the
# fetch's own code (a snapshot or segment differs from its manifest).
REPLAY_EXIT_CODES = {
    "Replayed": 0,
    "SegmentChecksumMismatch": SHA256_REFUSED,
    "ChainBroken": 20,
    "SegmentCorrupt": 21,
    "RevisionMismatch": 22,
    "LeaseUnknown": 23,
    "ScratchMemberUnavailable": 24,
    # a segment (or the replayed snapshot's key) and the restore's keys: as a snapshot's
    "EncryptionKeyMissing": 25,
    "DecryptionFailed": 26,
    "EncryptionKeyInvalid": 27,
    # an input of an encrypted backup not encrypted, or a manifest that does not authenticate
    "PlaintextRefused": 28,
    "ManifestUnauthenticated": 29,
}
_REASON_OF_EXIT_CODE = {code: reason for reason, code in REPLAY_EXIT_CODES.items()}


def replay_failure_reason(exit_code: int | None) -> str:
    """The restore's Failed reason for a replay container that ended with `exit_code` (not 0)."""
    reason = _REASON_OF_EXIT_CODE.get(exit_code) if exit_code is not None else None
    return reason if reason and reason != "Replayed" else "ReplayFailed"


def init_failure_reason(container: str, exit_code: int | None) -> str:
    """The base snapshot could not be fetched or restored into the replay pod's scratch space,
    or the replay into it (the apply container: core/restore/replay_pod.py) refused."""
    if container == "apply":
        return replay_failure_reason(exit_code)
    if container == "fetch" and exit_code == SHA256_REFUSED:
        return "ChecksumMismatch"
    if container == "fetch" and exit_code == UNSEALING_REFUSED:
        return "SnapshotNotDecodable"  # a missing or wrong key, or an altered object
    if container == "restore":
        return "SnapshotNotRestorable"
    return "ReplayFailed"


def chain_to_replay(listed: list[SegmentManifest], record: ReplayRecord) -> tuple[SegmentManifest, ...]:
    """The recorded segments among those `listed`, checked again where the replay runs: one
    run of the recorded chain with every sequence number from the first to the last and no
    revision missing, holding every revision after the base up to the recorded one. Raises
    ChainProblem saying what is missing."""
    wanted = [
        m for m in listed if m.chain == record.chain and record.first_sequence <= m.sequence <= record.last_sequence
    ]
    if not wanted:
        raise ChainProblem(
            f"no segment of chain {record.chain} numbered {record.first_sequence}..{record.last_sequence}"
        )
    found = runs(wanted)
    if len(found) != 1:
        gaps = ", ".join(f"{a.last}..{b.first}" for a, b in zip(found, found[1:], strict=False))
        raise ChainProblem(f"chain {record.chain} has a gap between revisions {gaps}")
    run = found[0]
    numbers = (run.segments[0].sequence, run.segments[-1].sequence)
    if numbers != (record.first_sequence, record.last_sequence):
        raise ChainProblem(
            f"chain {record.chain} holds segments {numbers[0]}..{numbers[1]}, the plan needs "
            f"{record.first_sequence}..{record.last_sequence}"
        )
    if not run.first <= record.base_revision + 1 <= run.last + 1:
        raise ChainProblem(
            f"chain {record.chain} holds revisions {run.first}..{run.last}; "
            f"the base snapshot is at {record.base_revision}"
        )
    if run.last < record.up_to_revision:
        raise ChainProblem(f"chain {record.chain} ends at revision {run.last}, before {record.up_to_revision}")
    return run.segments
