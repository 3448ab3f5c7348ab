"""Decides the one next step of an EtcdRestore from its spec, its status and what was
observed. Pure.

Invariants, each covered by tests/unit/test_restore_planner.py:
- nothing outside the restore's own status is changed before the snapshot verified and
  every check on the target passed (names fit labels, the version can restore it, the
  target is not emptyDir, not held by another restore);
- a newCluster restore never creates its cluster over existing objects: if the target's
  PVCs, pods, Services or PDB (by the cluster's labels or member names) exist, it stops;
- a restore whose name and spec are recorded on the target as applied is not applied
  again (AlreadyApplied); a second run needs a new name (or a changed spec);
- every member of the target is restored from the same snapshot, in parallel, with the
  full initial cluster and a token of this restore; the cluster is released only when
  every member's data directory is in place;
- a snapshot is only ever written into a volume this restore created, and at most once
  per member (its PVC is marked when its restore pod succeeded);
- old data is never deleted: in place, every old PVC is recorded in status, then set aside;
  the members restored in place get ordinals above every PVC set aside from the target, as
  status.preservedData records them and as observed by their label (a pass on an old copy of
  its own status still sees them);
- an in-place restore changes nothing while its target is not this operator's shard's
  (etcd_operator/core/shard.py): it waits, saying why (TargetOutsideShard; tests/unit/test_shard_restore.py);
- an in-place target is released only without a recorded quorum recovery or its approval,
  and the release and the record of this restore are one patch; nothing is stopped before
  both are gone. The restore removes the approval annotation; status.operation is the
  cluster controller's own record, which it drops on every pass that sees the hold (the
  pass that acknowledges the hold among them), and the restore waits to observe it gone;
- nothing is stopped, set aside or created in the target before its own controller has
  acknowledged this restore's hold (status.restoreHold names this restore's name and uid):
  a cluster pass that decided on a copy without the hold may still be running until then
  (WaitingForHoldAck; the cluster executor's live fence, HeldByRestore, is the second guard);
- every restore's pods bump revisions (and mark them compacted) by the bump recorded in
  status.revisionBump when the restore began: spec.revisionBump, or when it is not set one
  chosen above the highest revision the target served, by DEFAULT_REVISION_BUMP (chosen_bump;
  the progress message and an Event say so); none when it is 0; a bump into an etcd whose
  etcdutl cannot (older than versions.REVISION_BUMP_SINCE) is refused before anything is
  touched (RevisionBumpUnsupported);
- an in-place restore with a bump is refused before anything is touched when the snapshot's
  revision plus the bump is not above the highest revision the target reported
  (RevisionBumpTooSmall), or when the target reported none and the bump is below the default
  (TargetRevisionUnknown); that revision is recorded in status.targetRevisionBefore;
- a restore that arrives early waits (phase Pending, the Progressing reason and message
  say for what) and is not failed: an in-place target that does not exist yet or has not
  served yet, a source EtcdBackup that does not exist or has not completed a backup yet, a
  credentials or CA Secret that does not exist yet (etcd_operator/core/prerequisites.py);
- a source without credentialsSecretRef, in a namespace the install does not allow ambient
  credentials for, is never read: the restore waits (AmbientCredentialsNotAllowed;
  etcd_operator/core/storage_policy.py);
- nothing is created or changed for a target EtcdCluster being deleted (ClusterBeingDeleted);
  once it is gone, an in-place restore fails (ClusterNotFound);
- nothing is created or changed for an EtcdRestore being deleted, except that its hold is
  taken off an in-place target that has not acknowledged it yet (plan_deletion); a hold
  the cluster acknowledged, or on the new cluster the restore created, stays, and says so.
"""

from __future__ import annotations

from etcd_operator.core import prerequisites as pre
from etcd_operator.core import versions
from etcd_operator.core.cluster import naming
from etcd_operator.core.cluster.spec import ClusterSpec
from etcd_operator.core.restore import builders
from etcd_operator.core.restore import steps as s
from etcd_operator.core.restore.observed import ObjectState, Observed, RestoreRecord, TargetCluster, records_text
from etcd_operator.core.restore.replay_planner import plan_point_in_time
from etcd_operator.core.restore.spec import (
    BEFORE_RESTORING,
    DEFAULT_REVISION_BUMP,
    TERMINAL_PHASES,
    RestoreSpec,
    RestoreStatus,
)
from etcd_operator.core.storage_policy import AMBIENT_NOT_ALLOWED
from etcd_operator.core.timefmt import format_time

SEED_ATTEMPTS = 3  # restore pods that may fail, over all members, before the restore fails
PRE_3_6_STORAGE = "3.5"  # a snapshot without meta/storageVersion is in etcd 3.5's schema (or older)


# --- versions ---------------------------------------------------------------------------


def _minor(version: str | None) -> tuple[int, int] | None:
    try:
        return versions.parse_minor(version or "")
    except ValueError:
        return None


def snapshot_etcd_version(
    manifest_version: str | None, storage_version: str | None, storage_readable: bool
) -> str | None:
    """The etcd version a snapshot needs, read from the snapshot itself and, when there is
    one, from its manifest: the newer of the two. None when it cannot be known.
    `storage_version` is meta/storageVersion: None when absent (3.5 schema or older), ""
    while a 3.6 member was migrating (3.6), else e.g. "3.6.0"."""
    if not storage_readable:
        return None
    from_data = PRE_3_6_STORAGE if storage_version is None else (storage_version or "3.6")
    data_minor = _minor(from_data)
    if data_minor is None:
        return None
    if manifest_version is None:
        return from_data
    manifest_minor = _minor(manifest_version)
    if manifest_minor is None:
        return None
    return manifest_version if manifest_minor >= data_minor else from_data


def version_problem(target_version: str, snapshot_version: str | None) -> s.Fail | None:
    need = _minor(snapshot_version)
    if need is None:
        return s.Fail(
            "the etcd version of the snapshot is unknown (no manifest, and its storage version "
            "cannot be read); it is not restored into a cluster that may not be able to read it",
            code="SnapshotVersionUnknown",
        )
    have = _minor(target_version)
    if have is None or have < need:
        return s.Fail(
            f"the snapshot needs etcd {snapshot_version}; etcd {target_version} cannot restore it. "
            f"Use {need[0]}.{need[1]}.x or newer",
            code="VersionTooOld",
        )
    return None


def revision_bump_problem(spec: RestoreSpec, observed: Observed) -> s.Fail | None:
    """A bump the target version's etcdutl cannot make (checked before verification: the
    target's version is known from the spec)."""
    try:
        bump = DEFAULT_REVISION_BUMP if spec.revision_bump is None else spec.revision_bump
        problem = versions.revision_bump_problem(_target_version(spec, observed), bump)
    except (TypeError, ValueError):
        return None  # an unreadable version is refused by the target's own checks
    return s.Fail(problem.message, code=problem.reason) if problem else None


# --- revisions --------------------------------------------------------------------------


def chosen_bump(spec: RestoreSpec, status: RestoreStatus, observed: Observed) -> tuple[int, str]:
    """The bump the restore pods apply, and for people why, when the restore chose it: ""
    when spec.revisionBump sets it. Without one, the restored revisions start
    DEFAULT_REVISION_BUMP above the highest the target served: in place, the highest revision
    its members reported (a cluster restored before was bumped already, so the default alone
    may not reach it); a new cluster, or a target that reported none, serves nothing above the
    snapshot's own revision, so the default itself."""
    if spec.revision_bump is not None:
        return spec.revision_bump, ""
    source = status.restored_revision or 0
    before = observed.cluster.revision if spec.in_place and observed.cluster is not None else None
    if before is None or before <= source:
        return DEFAULT_REVISION_BUMP, (
            f"spec.revisionBump is not set: {DEFAULT_REVISION_BUMP} chosen, above the snapshot's revision {source}"
        )
    bump = before - source + DEFAULT_REVISION_BUMP
    return bump, (
        f"spec.revisionBump is not set: {bump} chosen, so that the restored revisions start "
        f"{DEFAULT_REVISION_BUMP} above revision {before}, the highest EtcdCluster {spec.target} served"
    )


def in_place_revision_check(spec: RestoreSpec, status: RestoreStatus, observed: Observed) -> s.Fail | str:
    """Whether the restored store's revisions start above every revision the in-place target
    served: a Fail, or a note for the progress message ("" when there is nothing to say).

    etcd hands out revisions in order; a watch client (an apiserver, an informer) resumes from
    the last one it saw. Restored without a bump, the store would hand the revisions between
    the snapshot's and the target's current one out again, for other data, and a watch resumed
    there would be served those events silently. With the bump the store starts at the
    snapshot's revision + spec.revisionBump, marked compacted, so such a watch is told its
    revision is compacted (Kubernetes: 410 Gone) and lists again, but only if that start is
    above what the target served. So:

    - the target reported a revision (the highest of status.members[].revision its controller
      recorded): the restore is refused unless snapshot revision + bump > it
      (RevisionBumpTooSmall). An unknown snapshot revision counts as 0, which only refuses more;
    - it reported none (no member answered, as when the store is lost, which is when a restore
      in place is most needed): refusing would leave no way to restore, so the restore goes on
      only with a bump of at least the default (10^9 revisions, more than any store takes
      between a backup and its restore), and says so; a smaller bump is refused
      (TargetRevisionUnknown), as nothing shows it would suffice;
    - spec.revisionBump 0 is the explicit statement that no client watches this store:
      nothing is checked.

    The revision checked is the one the cluster's status recorded when the checks passed;
    writes the target takes after that, until its members are stopped, are not counted, so
    the bump needs a margin over the difference (the default has one)."""
    cluster, (bump, _) = observed.cluster, chosen_bump(spec, status, observed)
    if not spec.in_place or cluster is None or bump <= 0:
        return ""
    source = status.restored_revision or 0
    before = cluster.revision
    if before is None:
        if bump >= DEFAULT_REVISION_BUMP:
            return (
                f"; EtcdCluster {cluster.name} reported no revision (no member answered), so the "
                f"bump of {bump} is trusted to lift the restored revisions above what it served"
            )
        return s.Fail(
            f"EtcdCluster {cluster.name} reported no revision (no member answered), so nothing shows that "
            f"spec.revisionBump {bump} lifts the restored revisions above what it served; a watch resumed "
            f"from an old revision could be served other data. Leave spec.revisionBump unset (the restore "
            f"then chooses {DEFAULT_REVISION_BUMP}), set it to at least that, or to 0 if no client watches this store",
            code="TargetRevisionUnknown",
        )
    if source + bump <= before:
        return s.Fail(
            f"the snapshot's revision {source} + spec.revisionBump {bump} = {source + bump} is not above "
            f"revision {before}, the highest EtcdCluster {cluster.name} served: restored, its revisions "
            f"would go back and a watch resumed from an old revision could be served other data. Set "
            f"spec.revisionBump above {before - source} with a margin for writes until it stops, leave it unset "
            f"(the restore then chooses {before - source + DEFAULT_REVISION_BUMP}), or set it to 0 if no client "
            "watches this store",
            code="RevisionBumpTooSmall",
        )
    return ""


# --- the target -------------------------------------------------------------------------


def belongs_to(cluster: str, obj: ObjectState, labels: dict[str, str]) -> bool:
    """Whether an object would be taken over by an EtcdCluster of this name: it carries its
    labels, or has the name of one of its members' pods or PVCs, Services or PDB, or of a
    Secret it creates (the observer reads Secrets by those names only)."""
    if obj.kind == "Secret":
        return True
    if labels.get(naming.LABEL_CLUSTER) == cluster or labels.get(builders.LABEL_PRESERVED_FROM) == cluster:
        return True
    if labels.get("app.kubernetes.io/name") == "etcd" and labels.get("app.kubernetes.io/instance") == cluster:
        return True
    if obj.kind == "Pod":
        return naming.member_ordinal(cluster, obj.name) is not None
    if obj.kind == "PersistentVolumeClaim":
        member = naming.pvc_member(obj.name)
        return naming.pvc_name(member) == obj.name and naming.member_ordinal(cluster, member) is not None
    if obj.kind == "Service":
        return obj.name in (naming.peer_service(cluster), naming.client_service(cluster))
    if obj.kind == "PodDisruptionBudget":
        return obj.name == naming.pdb_name(cluster)
    return False


def existing_objects(cluster: str, observed: Observed) -> list[str]:
    return sorted(o.ref for o in observed.namespace_objects if belongs_to(cluster, o, dict(o.labels)))


def _names_taken(target: str, observed: Observed, advice: str) -> s.Fail | None:
    """Objects of the names a new cluster takes: data-bearing children (TargetDataExists), or
    only Secrets of the names it creates (SecretNameTaken: the operator never writes over a
    Secret it did not create, cluster/ownership.py)."""
    existing = existing_objects(target, observed)
    secrets = [o for o in existing if o.startswith("Secret ")]
    if len(secrets) < len(existing):
        return s.Fail(
            f"objects of a cluster named {target} already exist: {', '.join(existing)}. {advice}",
            code="TargetDataExists",
        )
    if secrets:
        return s.Fail(
            f"a cluster named {target} creates Secrets of these names, and they exist already: "
            f"{', '.join(secrets)}. The operator never writes over a Secret it did not create, and a restore "
            f"creates nothing beside one. Choose another name, or delete or rename them",
            code="SecretNameTaken",
        )
    return None


def _applied_before(spec: RestoreSpec, observed: Observed, cluster: TargetCluster) -> RestoreRecord | None:
    """The record of this restore (same name and spec) applied by another EtcdRestore object."""
    return next(
        (
            r
            for r in reversed(cluster.records)
            if r.restore == observed.restore and r.spec_hash == spec.digest and r.uid != observed.uid
        ),
        None,
    )


def _name_problem(observed: Observed, target: str) -> s.Fail | None:
    too_long = {
        where: value
        for where, value in builders.label_values(observed.restore, target).items()
        if len(value) > builders.LABEL_VALUE_MAX
    }
    if not too_long:
        return None
    listed = ", ".join(f"{where}={value!r} ({len(value)})" for where, value in sorted(too_long.items()))
    return s.Fail(
        f"label values are at most {builders.LABEL_VALUE_MAX} characters, and this restore would "
        f"write {listed}; use a shorter name",
        code="NameTooLong",
    )


def _target_problem(spec: RestoreSpec, observed: Observed) -> s.Step | None:
    """Why the target cannot take this restore now, checked before anything is touched."""
    namespace, target, cluster = observed.namespace, spec.target, observed.cluster
    problem = _name_problem(observed, target)
    if problem:
        return problem
    if cluster is not None:
        if cluster.deleting:
            return _target_deleted(target)
        if cluster.records_error:
            return s.Wait(
                f"the annotation {builders.ANNOTATION_RESTORED_FROM} on EtcdCluster {target} cannot be "
                f"read ({cluster.records_error}), so it is unknown whether this restore was applied "
                f"already; fix or remove the annotation",
                code="RestoreRecordUnreadable",
            )
        applied = _applied_before(spec, observed, cluster)
        if applied:
            return s.SkipAlreadyApplied(
                f"EtcdRestore {observed.restore} with this spec was already applied to EtcdCluster {target} at "
                f"{applied.completed_at} (from {applied.source_key}, by the object with uid {applied.uid}); nothing "
                f"was touched. To restore again, create an EtcdRestore with a new name",
                applied_at=applied.completed_at,
            )
    if spec.in_place:
        if cluster is None:
            return _wait(pre.missing_cluster_wait(namespace, target, "the restore"))
        if cluster.outside_shard:
            return s.Wait(
                f"EtcdCluster {target} is not this operator's to change: {cluster.outside_shard}. "
                f"Label this EtcdRestore like its cluster, so that the cluster's own shard restores it",
                code="TargetOutsideShard",
            )
        # Its own hold (name and uid) is no obstacle: a pass on a copy of this restore's status
        # from before BeginRestore was recorded can see the hold it set since.
        if cluster.holder and (cluster.holder, cluster.hold_uid) != (observed.restore, observed.uid):
            return s.Fail(
                f"EtcdCluster {target} is held by EtcdRestore {cluster.holder} (annotation "
                f"{naming.ANNOTATION_RESTORE_IN_PROGRESS}); one restore at a time",
                code="TargetBusy",
            )
        if cluster.spec is None:
            return s.Fail(
                f"EtcdCluster {target}'s spec cannot be read: {cluster.spec_error}", code="InvalidClusterSpec"
            )
        readiness = pre.ClusterReadiness(cluster.phase or "", cluster.available, cluster.ready_members)
        wait = pre.cluster_wait(namespace, target, readiness, "the restore")
        if readiness.bootstrapping and wait is not None:  # a bootstrapping cluster always has a wait
            return _wait(wait)
        target_spec = cluster.spec
    else:
        if cluster is not None:
            return s.Fail(
                f"EtcdCluster {namespace}/{target} already exists; a restore into a new cluster never "
                f"touches an existing one",
                code="TargetExists",
            )
        taken = _names_taken(
            target,
            observed,
            "They may hold data (a deleted EtcdCluster keeps its PVCs); a restore into a new cluster never "
            "touches them. Choose another name, or delete them if their data is not needed",
        )
        if taken:
            return taken
        if observed.new_cluster_problem:
            return s.Fail(f"spec.target.newCluster.spec: {observed.new_cluster_problem}", code="InvalidClusterSpec")
        try:
            target_spec = ClusterSpec.from_dict(spec.new_cluster_spec)
            versions.parse(target_spec.version)
        except (TypeError, ValueError) as e:
            return s.Fail(f"spec.target.newCluster.spec: {e}", code="InvalidClusterSpec")
    if target_spec.storage.empty_dir:
        return s.Fail(
            f"EtcdCluster {target} keeps its data in emptyDir volumes, which a restored data directory "
            f"cannot be put into; restore into a cluster with persistent storage",
            code="EmptyDirTarget",
        )
    return None


def _target_deleted(target: str) -> s.Wait:
    return s.Wait(
        f"EtcdCluster {target} is being deleted; nothing is created or changed for it (the restore fails "
        f"once it is gone)",
        code="ClusterBeingDeleted",
    )


def _wait(wait: pre.Wait) -> s.Wait:
    return s.Wait(wait.message, code=wait.reason)


def _source_wait(observed: Observed) -> s.Wait | None:
    """What the snapshot's source still lacks before it can be verified, or None."""
    source, namespace = observed.source, observed.namespace
    if source is None:
        return None
    if source.backup is not None and not source.backup_found:
        return s.Wait(
            f"EtcdBackup {namespace}/{source.backup} does not exist yet; the restore starts once it has "
            f"completed a backup",
            code=pre.WAITING_FOR_BACKUP,
        )
    if source.credentials_refusal:
        return s.Wait(source.credentials_refusal, code=AMBIENT_NOT_ALLOWED)
    if source.backup is not None and not source.backup_completed:
        return s.Wait(
            f"EtcdBackup {namespace}/{source.backup} has not completed a backup yet (phase "
            f"{source.backup_phase or 'not reported yet'}); the restore starts once it has",
            code=pre.WAITING_FOR_BACKUP,
        )
    wait = pre.secrets_wait(namespace, source.missing_secrets, "the restore")
    return _wait(wait) if wait else None


def _target_version(spec: RestoreSpec, observed: Observed) -> str:
    if spec.in_place and observed.cluster is not None and observed.cluster.spec is not None:
        return observed.cluster.spec.version
    return ClusterSpec.from_dict(spec.new_cluster_spec).version


# --- the plan ---------------------------------------------------------------------------


def plan(spec: RestoreSpec, status: RestoreStatus, observed: Observed, now: float) -> s.Step:
    if status.phase in TERMINAL_PHASES:
        return s.Idle(f"the restore ended: {status.phase}")
    if observed.deleting:
        return s.Wait("the EtcdRestore is being deleted; nothing more is created or changed for it", code="Deleting")
    if status.phase in BEFORE_RESTORING:
        return _plan_checks(spec, status, observed)

    return _plan_restoring(spec, status, observed, now)


def _plan_checks(spec: RestoreSpec, status: RestoreStatus, observed: Observed) -> s.Step:
    """Reads only: the target is checked on every pass, the snapshot once."""
    problem = _target_problem(spec, observed) or revision_bump_problem(spec, observed)
    if problem:
        return problem
    if not status.verified:
        waiting = _source_wait(observed)
        if waiting:
            return waiting
    if status.phase in (None, "Pending"):
        return s.StartVerifying("verifying the snapshot")
    if spec.point is not None and not status.verified:
        step = plan_point_in_time(spec, status, observed)
        if isinstance(step, s.PlanReplay) and step.record is not None:
            # The replay runs the target's etcd on the base snapshot: it must be able to read it.
            problem = version_problem(_target_version(spec, observed), step.record.base_etcd_version)
            if problem:
                return problem
        if step is not None:
            return step
        record = status.point_in_time
        key = record.snapshot_key if record else ""
        return s.VerifySnapshot(f"verifying {key}", key=key)
    if not status.verified:
        return s.VerifySnapshot("verifying the snapshot")
    problem = version_problem(_target_version(spec, observed), status.snapshot_version)
    if problem:
        return problem
    revisions = in_place_revision_check(spec, status, observed)
    if isinstance(revisions, s.Fail):
        return revisions
    source, (bump, chosen) = status.restored_revision, chosen_bump(spec, status, observed)
    bumped = None if source is None else source + bump
    starts = (
        f"; revisions bumped by {bump}, to start at {bumped if bumped is not None else 'the snapshot revision + bump'}"
        if bump
        else "; revisions not bumped (spec.revisionBump 0)"
    ) + (f" ({chosen})" if chosen else "")
    return s.BeginRestore(
        f"snapshot verified; restoring into {'the existing' if spec.in_place else 'new'} EtcdCluster "
        f"{spec.target}{starts}{revisions}",
        target=spec.target,
        revision_bump=bump,
        bump_chosen=chosen,
        bumped_revision=bumped,
        target_revision_before=observed.cluster.revision if spec.in_place and observed.cluster else None,
    )


def _plan_restoring(spec: RestoreSpec, status: RestoreStatus, observed: Observed, now: float) -> s.Step:
    cluster, target, me = observed.cluster, spec.target, observed.restore
    if cluster is not None and cluster.deleting:
        return _target_deleted(target)
    if cluster is None:
        if spec.in_place:
            return s.Fail(
                f"EtcdCluster {observed.namespace}/{target} disappeared during the restore", code="ClusterNotFound"
            )
        taken = _names_taken(target, observed, "The EtcdCluster is not created over them")
        if taken:
            return taken
        return s.CreateTargetCluster(f"creating EtcdCluster {target}, held until its data is restored")
    if any(r.uid == observed.uid for r in cluster.records):
        return _plan_completion(cluster)
    if cluster.holder != me:
        if cluster.holder is not None:
            return s.Fail(
                f"EtcdCluster {target} is held by EtcdRestore {cluster.holder}; it is not touched", code="TargetBusy"
            )
        if not spec.in_place:
            return s.Fail(
                f"EtcdCluster {target} was not created by this restore; it is not touched", code="TargetExists"
            )
        if status.preserved or status.seed_members:
            return s.Fail(
                f"the annotation {naming.ANNOTATION_RESTORE_IN_PROGRESS} was removed from EtcdCluster "
                f"{target} during the restore; the restore stops here. The old data is in "
                f"{', '.join(status.preserved) or 'the cluster PVCs'}",
                code="Aborted",
            )
        return s.HoldCluster(f"holding EtcdCluster {target} for an in-place restore")
    if cluster.hold_uid != observed.uid:
        return s.HoldCluster(f"marking the hold on EtcdCluster {target} with this restore's uid")
    if cluster.hold_ack != (me, observed.uid):
        return s.Wait(
            f"waiting for EtcdCluster {target}'s controller to acknowledge this restore's hold "
            f"(status.restoreHold); nothing is stopped or created before it does",
            code="WaitingForHoldAck",
        )
    if cluster.spec is None:
        return s.Wait(
            f"EtcdCluster {target}'s spec cannot be read ({cluster.spec_error}); the restore waits until it is fixed",
            code="InvalidClusterSpec",
        )

    if spec.in_place:
        if cluster.operation or cluster.recovery_approved:
            return s.ClearQuorumRecovery(
                f"dropping the recorded {cluster.operation or 'quorum recovery approval'} of {target}: it was "
                f"about the old data",
                clear_operation=bool(cluster.operation),
                clear_approval=cluster.recovery_approved,
            )
        if not status.seed_members:
            return _plan_set_aside(status, observed, cluster)
    elif not status.seed_members:
        return _choose_members(cluster, 0)
    return _plan_seed(spec, status, observed, cluster, now)


def _choose_members(cluster: TargetCluster, first: int) -> s.Step:
    size = cluster.spec.size if cluster.spec else 1
    members = tuple(naming.member_name(cluster.name, first + i) for i in range(max(size, 1)))
    return s.ChooseMembers(
        f"restoring {', '.join(members)} from the snapshot, all at once", members=members, min_ordinal=first
    )


def _plan_set_aside(status: RestoreStatus, observed: Observed, cluster: TargetCluster) -> s.Step:
    live = tuple((p.name, p.uid) for p in observed.pods if not p.deleting)
    if live:
        return s.StopMembers(f"stopping {len(live)} members", pods=live)
    if observed.pods:
        return s.Wait(f"waiting for {len(observed.pods)} members to stop", code="Restoring")
    names = {p.name for p in observed.pvcs}
    recorded = tuple(sorted(set(status.preserved) | names))
    if recorded != status.preserved:
        return s.RecordPreservedData("recording the old data before it is set aside", pvcs=recorded)
    if observed.pvcs:
        return s.SetAsideData(
            f"keeping the old data aside in {', '.join(sorted(names))} until the restore succeeds",
            pvcs=tuple(sorted((p.name, p.uid) for p in observed.pvcs)),
        )
    # The observed set-aside PVCs count too: an old copy of this restore's status may not list them yet.
    kept = set(status.preserved) | {p.name for p in observed.preserved_pvcs}
    ordinals = [naming.member_ordinal(cluster.name, naming.pvc_member(n)) for n in kept]
    first = max(max((o for o in ordinals if o is not None), default=-1) + 1, cluster.min_ordinal)
    return _choose_members(cluster, first)


def _plan_seed(
    spec: RestoreSpec, status: RestoreStatus, observed: Observed, cluster: TargetCluster, now: float
) -> s.Step:
    members = status.seed_members
    pvcs = {p.name: p for p in observed.seed_pvcs}
    missing = tuple(m for m in members if naming.pvc_name(m) not in pvcs)
    if missing:
        return s.CreateSeedVolumes(f"creating {', '.join(naming.pvc_name(m) for m in missing)}", members=missing)
    for member in members:
        pvc = pvcs[naming.pvc_name(member)]
        if pvc.annotation(builders.ANNOTATION_SEED_OF) != observed.uid:
            return s.Fail(
                f"PVC {pvc.name} exists but was not created by this restore; a snapshot is only restored "
                f"into a volume the restore created",
                code="SeedVolumeNotOurs",
            )
    pods = {}
    for pod in observed.seed_pods:
        if observed.uid not in pod.owner_uids:
            return s.Fail(f"pod {pod.name} exists and does not belong to this restore", code="SeedPodNameTaken")
        pods[pod.label(builders.LABEL_RESTORE_MEMBER)] = pod
    pending = [
        m for m in members if pvcs[naming.pvc_name(m)].annotation(builders.ANNOTATION_RESTORED_BY) != observed.uid
    ]
    succeeded = [m for m in pending if m in pods and pods[m].phase == "Succeeded"]
    if succeeded:
        return s.MarkSeedsRestored(
            f"{', '.join(succeeded)}: data directory restored",
            pvcs=tuple(naming.pvc_name(m) for m in succeeded),
            timings=tuple((m, pods[m].created_at, pods[m].started_at, pods[m].finished_at) for m in succeeded),
        )
    failed = [pods[m] for m in pending if m in pods and pods[m].phase == "Failed" and not pods[m].deleting]
    if failed:
        attempt = status.seed_attempts + 1
        if attempt >= SEED_ATTEMPTS:
            return s.Fail(
                f"restore pods failed {attempt} times, the last {failed[0].name}; see its logs", code="SeedFailed"
            )
        return s.RetrySeedPod(
            f"the restore pod {failed[0].name} failed; attempt {attempt + 1} of {SEED_ATTEMPTS}",
            pod=failed[0].name,
            pod_uid=failed[0].uid,
            attempt=attempt,
        )
    unstarted = tuple(m for m in pending if m not in pods)
    if unstarted:
        return s.StartSeedPods(
            f"restoring {', '.join(unstarted)} in parallel", members=unstarted, tls=peer_tls(cluster)
        )
    if pending:
        return s.Wait(f"restoring {', '.join(pending)} in parallel", code="Restoring")
    done = tuple(sorted((p.name, p.uid) for p in pods.values()))
    if done:
        return s.RemoveSeedPods("every member is restored; removing the restore pods", pods=done)
    if cluster.records_error:
        return s.Wait(
            f"the annotation {builders.ANNOTATION_RESTORED_FROM} on EtcdCluster {cluster.name} cannot be "
            f"read ({cluster.records_error}); it is not overwritten",
            code="RestoreRecordUnreadable",
        )
    record = RestoreRecord(
        observed.restore,
        observed.uid,
        observed.generation,
        spec.digest,
        status.source_key or "",
        status.sha256 or "",
        format_time(now),
    )
    return s.ReleaseCluster(
        f"{', '.join(members)} hold the restored data; they start together",
        records=records_text(cluster.records + (record,)),
    )


def peer_tls(cluster: TargetCluster) -> bool:
    """Whether the restored members' peer URLs are https: the transport the cluster recorded
    (status.tls.transport), else what its spec asks for."""
    if cluster.transport:
        return cluster.transport == "https"
    return cluster.spec is not None and cluster.spec.tls.enabled


def _plan_completion(cluster: TargetCluster) -> s.Step:
    size = cluster.spec.size if cluster.spec else 0
    progress = f"{cluster.ready_members}/{size} members ready"
    if cluster.available and size and cluster.ready_members >= size and cluster.phase == "Running":
        return s.Complete(progress, cluster_id=cluster.cluster_id or "", ready=cluster.ready_members, size=size)
    return s.Wait(progress, code="Restoring")


def plan_deletion(spec: RestoreSpec, status: RestoreStatus, observed: Observed) -> s.Step:
    """What an EtcdRestore being deleted does to its target's hold: release it only if this
    restore holds it, the cluster has not acknowledged the hold yet, and nothing was stopped
    or set aside (no member pod of the target is going away, none was recorded as preserved,
    no member was chosen for seeding). The release patch is guarded by the resourceVersion
    observed, so an acknowledgement written meanwhile makes it look again."""
    cluster, me = observed.cluster, observed.restore
    if cluster is None or cluster.holder != me or cluster.hold_uid not in (None, observed.uid):
        return s.Idle("this restore holds nothing")
    if not spec.in_place:
        return s.Wait(
            f"EtcdCluster {cluster.name} was created by this restore and stays held: delete it, or "
            f"remove its annotation {naming.ANNOTATION_RESTORE_IN_PROGRESS} to start it empty",
            code="HeldAfterDeletion",
        )
    if cluster.hold_ack == (me, observed.uid):
        # The pass that acknowledged the hold also dropped status.clusterID (a restored cluster
        # gets a new identity): released now, a cluster that lost every member could look new.
        return s.Wait(
            f"EtcdCluster {cluster.name} stays held: its controller acknowledged the hold and no longer "
            f"records the old cluster's identity; remove the annotation "
            f"{naming.ANNOTATION_RESTORE_IN_PROGRESS} once you decide what the cluster starts from",
            code="HeldAfterDeletion",
        )
    stopping = [p.name for p in observed.pods if p.deleting]
    if status.preserved or status.seed_members or stopping:
        kept = ", ".join(status.preserved) or "the cluster's PVCs"
        return s.Wait(
            f"EtcdCluster {cluster.name} stays held: this restore stopped its members and keeps the old "
            f"data in {kept}; remove the annotation {naming.ANNOTATION_RESTORE_IN_PROGRESS} once you "
            f"decide what the cluster starts from",
            code="HeldAfterDeletion",
        )
    return s.ReleaseHold(
        f"EtcdRestore {me} was deleted before it stopped anything; EtcdCluster {cluster.name} goes on as before"
    )
