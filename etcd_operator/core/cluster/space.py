"""Space management, planned: NOSPACE remediation, defragmentation on request or by
threshold inside a window, the backend quota a member's disk can hold, and PVC expansion.
Pure; the cluster planner calls it, each step is one executor handler.

Invariants (tests/unit/test_space.py):
- NOSPACE is remediated in place: compaction, defragmentation and disarm only; nothing is
  removed, replaced or rolled for it (the planner's HOLD_STATES still apply);
- at most one member is defragmented per step, followers before the leader, and only while
  the other healthy voters keep a quorum and its volume has room for the compacted copy;
- the alarm is disarmed only when every member was defragmented and fits under the quota
  with headroom; otherwise a condition names the bytes missing;
- PVCs only grow, and only where the StorageClass allows expansion; the quota follows the
  smallest volume the members actually have.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from etcd_operator.core import conditions as c
from etcd_operator.core.cluster import naming, quota
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.health import NOSPACE, Health, HealthState, member_name
from etcd_operator.core.cluster.observed import Member, Observed
from etcd_operator.core.cluster.recorded import ClusterStatus, DefragmentationRecord, SpaceRecoveryRecord
from etcd_operator.core.cluster.spec import ClusterSpec, SpecProblem

ETCD_DEFAULT_QUOTA = 2 * quota.GiB  # etcd's own default when --quota-backend-bytes is unset
DAY = 86400.0


# --- quota and disk -------------------------------------------------------------------


def spec_disk(spec: ClusterSpec) -> int | None:
    """The volume size the spec asks for; None when unbounded (emptyDir without sizeLimit)."""
    if spec.storage.empty_dir:
        return quota.parse_quantity(spec.storage.empty_dir_size_limit)
    return quota.parse_quantity(spec.storage.size)


def member_disk(spec: ClusterSpec, observed: Observed, member: str) -> int | None:
    """What a member's volume holds: the PVC's reported capacity, else its request."""
    if spec.storage.empty_dir:
        return spec_disk(spec)
    pvc = observed.pvcs.get(naming.pvc_name(member))
    if pvc is None:
        return spec_disk(spec)
    return pvc.capacity or pvc.requested or spec_disk(spec)


def smallest_disk(spec: ClusterSpec, observed: Observed) -> int | None:
    wanted = spec_disk(spec)
    if spec.storage.empty_dir:
        return wanted
    have = [p.capacity or p.requested for p in observed.pvcs.values() if not p.deleting]
    sizes = [s for s in [wanted, *have] if s]
    return min(sizes) if sizes else None


def storage_problems(spec: ClusterSpec, observed: Observed) -> list[SpecProblem]:
    problems = []
    disk = spec_disk(spec)
    wanted = spec.etcd.quota_backend_bytes
    if wanted is not None and disk is not None and wanted > quota.quota_for_disk(disk):
        problems.append(
            SpecProblem(
                "QuotaExceedsStorage",
                f"spec.etcd.quotaBackendBytes {wanted} needs a volume of at least {quota.disk_needed(wanted)} bytes "
                f"(twice the quota for defragmentation and snapshots, plus {quota.WAL_RESERVE} for the WAL), but the "
                f"volume is {disk} bytes; the quota {quota.quota_for_disk(disk)} derived from the volume is used. "
                f"Lower quotaBackendBytes or grow spec.storage",
            )
        )
    elif disk is not None and quota.quota_for_disk(disk) < quota.MIN_QUOTA:
        problems.append(
            SpecProblem(
                "StorageTooSmall",
                f"a volume of {disk} bytes leaves no room for a backend quota of {quota.MIN_QUOTA} bytes "
                f"beside the WAL "
                f"({quota.WAL_RESERVE} bytes) and a copy of the database; use at least "
                f"{quota.disk_needed(quota.MIN_QUOTA)} bytes",
            )
        )
    if not spec.storage.empty_dir and disk is not None:
        larger = sorted(p.name for p in observed.pvcs.values() if p.requested and p.requested > disk)
        if larger:
            problems.append(
                SpecProblem(
                    "StorageShrink",
                    f"spec.storage.size {spec.storage.size} is smaller than PVCs {', '.join(larger)}; volumes cannot "
                    f"shrink, so they keep their size and new members get the largest",
                )
            )
    return problems


def acting_storage(
    spec: ClusterSpec, status: ClusterStatus, observed: Observed, problems: list[SpecProblem]
) -> ClusterSpec:
    """The spec with the quota resolved (explicit, or derived from the disk, never above what
    the smallest member volume holds) and a refused shrink replaced by the PVCs' size."""
    reasons = {p.reason for p in problems}
    if "StorageShrink" in reasons:
        largest = max(p.requested for p in observed.pvcs.values() if p.requested)
        spec = dataclasses.replace(spec, storage=dataclasses.replace(spec.storage, size=str(largest)))
    wanted = spec.etcd.quota_backend_bytes
    if wanted is None and not status.quota_recorded and (observed.pods or status.bootstrapped):
        # A cluster created before quotas were derived keeps etcd's default (recorded as such
        # in status from now on): an operator upgrade never restarts its members by itself.
        return spec
    if wanted is None and status.quota_recorded and status.recorded_quota is None:
        return spec  # etcd's default, as recorded: set quotaBackendBytes to change it
    disk = smallest_disk(spec, observed)
    if disk is None:
        return spec  # unbounded emptyDir: etcd's default unless set
    limit = max(quota.MIN_QUOTA, quota.quota_for_disk(disk))
    resolved = limit if wanted is None or "QuotaExceedsStorage" in reasons else min(wanted, limit)
    if wanted is None and status.recorded_quota is not None and resolved < status.recorded_quota:
        # A derived quota follows volume growth, never down: the quota recorded in status is
        # the one the members run (from status, not from pods, which come and go).
        resolved = status.recorded_quota
    return dataclasses.replace(spec, etcd=dataclasses.replace(spec.etcd, quota_backend_bytes=resolved))


def quota_in_effect(spec: ClusterSpec) -> int:
    """The acting spec's quota (see acting_storage), or etcd's default."""
    return spec.etcd.quota_backend_bytes or ETCD_DEFAULT_QUOTA


# --- NOSPACE remediation --------------------------------------------------------------


def _ordinal(observed: Observed, name: str) -> int:
    ordinal = naming.member_ordinal(observed.cluster, name)
    return ordinal if ordinal is not None else 1 << 30


def _followers_then_leader(
    observed: Observed, health: Health, members: Iterable[Member], names: Mapping[int, str | None]
) -> list[Member]:
    return sorted(members, key=lambda m: (m.id == health.leader_id, _ordinal(observed, names[m.id] or m.hex_id)))


def blocking_keeps_quorum(health: Health, member: Member) -> bool:
    """While `member` is blocked (defragmenting), the other healthy voters whose pods are not
    stopping still form a quorum."""
    others = [m for m in health.voters if m.id != member.id and health.stays(m)]
    return len(others) >= naming.quorum(len(health.voters))


def compaction_target(spec: ClusterSpec, observed: Observed) -> int:
    current = max((s.revision for s in observed.etcd.statuses.values()), default=0)
    return max(0, current - spec.space_recovery.retain_revisions)


def shortfall(
    spec: ClusterSpec, observed: Observed, health: Health, names: Mapping[int, str | None]
) -> tuple[str, int] | None:
    """The member whose database misses the quota (less headroom) by the most bytes, and
    by how many; None when every answering member fits."""
    limit = quota_in_effect(spec) - quota.fits_headroom(quota_in_effect(spec))
    worst = None
    for member in health.members:
        status = observed.etcd.statuses.get(member.id)
        if status is None:
            continue
        missing = status.db_size - limit
        if missing > 0 and (worst is None or missing > worst[1]):
            worst = (names.get(member.id) or member.hex_id, missing)
    return worst


def finish_space_recovery(record: SpaceRecoveryRecord | None, observed: Observed, health: Health) -> a.Step | None:
    if record is None or not health.members or NOSPACE in health.alarm_names:
        return None
    if not observed.etcd.answered:
        return None
    return a.FinishSpaceRecovery("the NOSPACE alarm is no longer raised")


def plan_no_space(
    spec: ClusterSpec,
    record: SpaceRecoveryRecord | None,
    observed: Observed,
    health: Health,
    names: dict[int, str | None],
) -> a.Step:
    """The next remediation step while NOSPACE is raised; a Wait when none can be taken."""
    if record is None:
        return a.BeginSpaceRecovery(
            "etcd raised the NOSPACE alarm: compacting, defragmenting one member at a time and disarming it"
        )
    target = compaction_target(spec, observed)
    if record.compacted_revision is None or target > record.compacted_revision:
        return a.CompactRevisions(
            f"NOSPACE: compacting revisions up to {target}, keeping the last {spec.space_recovery.retain_revisions}",
            target,
        )
    pending = [m for m in health.members if (names[m.id] or m.hex_id) not in record.defragmented]
    for member in _followers_then_leader(observed, health, pending, names):
        name = names[member.id] or member.hex_id
        status = observed.etcd.statuses.get(member.id)
        if status is None:
            return a.Wait(f"NOSPACE: waiting for {name} to answer so that it can be defragmented")
        if not blocking_keeps_quorum(health, member):
            return a.Wait(f"NOSPACE: defragmenting {name} would block a quorum; waiting for the other members")
        missing = quota.defrag_room_missing(member_disk(spec, observed, name), status.db_size, status.db_size_in_use)
        if missing:
            return a.Wait(
                f"NOSPACE: {name}'s volume lacks {missing} bytes for the defragmented copy; grow spec.storage.size"
            )
        role = "leader" if member.id == health.leader_id else "follower"
        return a.DefragmentForSpace(f"NOSPACE: defragmenting {role} {name}", name, member.id)
    worst = shortfall(spec, observed, health, names)
    if worst is not None:
        too_large, missing = worst
        return a.Wait(
            f"NOSPACE: after compaction and defragmentation the database of {too_large} is {missing} bytes "
            f"too large for the quota {quota_in_effect(spec)} (less "
            f"{quota.fits_headroom(quota_in_effect(spec))} bytes headroom); delete keys (deletes are "
            f"allowed under the alarm) or raise the quota and storage"
        )
    alarmed = tuple(sorted({member for member, name in health.alarms if name == NOSPACE}))
    return a.DisarmNoSpaceAlarm("NOSPACE: every member's database fits under the quota again", alarmed)


# --- defragmentation ------------------------------------------------------------------


def _seconds_of_day(text: str) -> float:
    hours, minutes = text.split(":")
    return int(hours) * 3600 + int(minutes) * 60


def in_defrag_window(spec: ClusterSpec, now: float) -> bool:
    """Inside the daily UTC window for automatic defragmentation; always without a window."""
    if not spec.defrag.window_start:
        return True
    since_start = (now % DAY - _seconds_of_day(spec.defrag.window_start)) % DAY
    return since_start < spec.defrag.window_seconds


def defrag_room(spec: ClusterSpec, observed: Observed, name: str, member_id: int) -> int:
    """Bytes missing on the member's volume for a defragmented copy (0: room enough)."""
    status = observed.etcd.statuses.get(member_id)
    if status is None:
        return 0
    return quota.defrag_room_missing(member_disk(spec, observed, name), status.db_size, status.db_size_in_use)


def plan_requested_defragmentation(
    spec: ClusterSpec, record: DefragmentationRecord, observed: Observed, health: Health, names: dict[int, str | None]
) -> a.Step | None:
    """A new etcd.operator.dev/defragment token: every member once, followers then leader."""
    token = observed.defrag_requested
    if not token or token == record.last_token:
        return None
    if health.state != HealthState.HEALTHY:
        return a.Wait(f"defragmentation requested ({token}); waiting for every member to be healthy")
    done = record.defragmented if record.token == token else ()
    pending = [m for m in health.members if (names[m.id] or m.hex_id) not in done]
    for member in _followers_then_leader(observed, health, pending, names):
        name = names[member.id] or member.hex_id
        missing = defrag_room(spec, observed, name, member.id)
        if missing:
            return a.Wait(
                f"defragmentation requested ({token}): {name}'s volume lacks {missing} bytes for the defragmented copy"
            )
        return a.DefragmentOnRequest(f"defragmentation requested ({token})", name, member.id, token)
    return a.FinishDefragmentRequest(f"every member defragmented for request {token}", token)


# --- PVC expansion --------------------------------------------------------------------


def plan_volume_expansion(spec: ClusterSpec, observed: Observed) -> a.Step | None:
    wanted = spec_disk(spec)
    if spec.storage.empty_dir or wanted is None:
        return None
    for pvc in sorted(observed.pvcs.values(), key=lambda p: p.name):
        if pvc.deleting or pvc.requested is None or pvc.requested >= wanted or not pvc.expandable:
            continue
        member = naming.pvc_member(pvc.name)
        return a.ExpandMemberPVC(f"spec.storage.size grew to {spec.storage.size}", member, spec.storage.size)
    return None


# --- conditions -----------------------------------------------------------------------


def storage_condition(spec: ClusterSpec, observed: Observed) -> c.Condition:
    wanted = spec_disk(spec)
    if spec.storage.empty_dir or wanted is None:
        return c.Condition("StorageResized", True, "AsSpecified", "")
    pvcs = sorted((p for p in observed.pvcs.values() if not p.deleting), key=lambda p: p.name)
    refused = [p for p in pvcs if p.requested is not None and p.requested < wanted and p.expandable is False]
    if refused:
        classes = sorted({p.storage_class or "(none)" for p in refused})
        return c.Condition(
            "StorageResized",
            False,
            "ExpansionNotAllowed",
            f"PVCs {', '.join(p.name for p in refused)} stay below spec.storage.size "
            f"{spec.storage.size}: StorageClass {', '.join(classes)} does not set "
            f"allowVolumeExpansion",
        )
    unknown = [p for p in pvcs if p.requested is not None and p.requested < wanted and p.expandable is None]
    if unknown:
        return c.Condition(
            "StorageResized",
            False,
            "ExpansionUnknown",
            f"PVCs {', '.join(p.name for p in unknown)} are below spec.storage.size; their "
            f"StorageClass could not be read, so they are left as they are",
        )
    growing = [p for p in pvcs if (p.requested or 0) < wanted or (p.capacity is not None and p.capacity < wanted)]
    if growing:
        return c.Condition(
            "StorageResized",
            False,
            "Expanding",
            f"PVCs {', '.join(p.name for p in growing)} are growing to {spec.storage.size}",
        )
    return c.Condition("StorageResized", True, "AsSpecified", "")


def database_condition(
    spec: ClusterSpec, record: SpaceRecoveryRecord | None, observed: Observed, health: Health, action: a.Step
) -> c.Condition:
    if NOSPACE not in health.alarm_names:
        return c.Condition("DatabaseFits", True, "WithinQuota", "")
    names = {m.id: member_name(observed, m) or m.hex_id for m in health.members}
    done = (
        record is not None
        and record.compacted_revision is not None
        and all(names[m.id] in record.defragmented for m in health.members)
    )
    worst = shortfall(spec, observed, health, names) if done else None
    if worst is not None:
        member, missing = worst
        return c.Condition(
            "DatabaseFits",
            False,
            "QuotaExceeded",
            f"after compaction and defragmentation {member}'s database is still {missing} bytes "
            f"over the quota {quota_in_effect(spec)} less its headroom; {missing} bytes are missing. "
            f"Delete keys or raise the quota and storage",
        )
    return c.Condition("DatabaseFits", False, "Remediating", action.reason)


def space_conditions(
    spec: ClusterSpec, status: ClusterStatus, observed: Observed, health: Health, action: a.Step
) -> list[c.Condition]:
    return [
        database_condition(spec, status.space_recovery, observed, health, action),
        storage_condition(spec, observed),
    ]
