"""How soon the next pass looks again while a member is being added or removed, or
after a certificate was written. Pure.

Passes are otherwise paced by the reconciler's defaults (about a second after a step, a
few seconds while waiting). Adding a member is a chain of steps, each of which waits on
something short: a pod starting, a learner catching up, etcd's reconfiguration guard.
Removing one is a chain too: the member, then its pod, then its PVC. Here the next pass
comes sooner. Nothing here decides or allows a step: a pass only
observes again and plans as always, and etcd's own guards still refuse a step that is
not safe yet (a refusal is "not yet", never an error).

A new TLS cluster records its transport, issues its certificates and starts its first
member: after a certificate step the next pass, which reads the Secrets live, comes at once
too.

A steady cluster is polled less the longer it stays quiet (steady_interval): its members'
status is what a steady pass reads that no watch reports, and an idle cluster's does not
change. A change to a child or to the object still wakes a pass at once, whatever the
interval."""

from __future__ import annotations

from etcd_operator.core.cluster import steps as a

# The pod of a first member or a learner was created: it serves within about a second.
POD_STARTING = 0.3
# A bookkeeping step of a member addition (the transport record, a joined pod's
# annotations), a promotion, or a step of a removal: the next step of the chain can follow
# at once.
CHAIN_STEP = 0.2
# A certificate Secret was written (issued, or given the CA's trust bundle): what follows
# waits on nothing but the next pass.
CERTIFICATE_WRITTEN = 0.2
# A bootstrap's members were started: while they elect a leader (within about a second of
# each other's start) the passes come this often, for BOOTSTRAP_WINDOW seconds, so that the
# operator sees them serve without waiting for a pod event (its readiness probe runs every 5 s).
MEMBERS_STARTING = 0.3
BOOTSTRAP_WINDOW = 20.0
# A new learner is catching up.
LEARNER_CATCHING_UP = 0.3
# A learner still catching up after this long is not just starting: the passes slow to
# the reconciler's default (until spec.recovery.memberUnhealthyTimeout replaces it).
NEW_LEARNER_WINDOW = 10.0
# Every voter refused a member add: none has been connected to a quorum of voters for
# etcd's HealthInterval (5 s) yet. The refusal says nothing of when it will pass.
ADD_REFUSED = 0.5

_AFTER_DONE: dict[type[a.Step], float] = {
    a.RecordTransport: CHAIN_STEP,
    a.RecordPeerIdentity: CHAIN_STEP,
    a.CheckPodSpec: CHAIN_STEP,  # the step it was asked for follows
    a.BootstrapFirstMember: POD_STARTING,
    a.BootstrapMembers: POD_STARTING,
    a.AddLearner: POD_STARTING,
    a.SettleMemberPod: CHAIN_STEP,
    a.SettleStartedMembers: CHAIN_STEP,
    a.PromoteLearner: CHAIN_STEP,
    a.RemoveMember: CHAIN_STEP,
    a.DeleteMemberPod: CHAIN_STEP,
    a.DeleteMemberPVC: CHAIN_STEP,
    a.IssueCertificate: CERTIFICATE_WRITTEN,
    a.SyncTrustBundle: CERTIFICATE_WRITTEN,
}

# A refused promotion keeps the default: a learner that answers but does not catch up
# (cut off from the leader) is refused again and again.
_AFTER_REFUSED: dict[type[a.Step], float] = {
    a.AddLearner: ADD_REFUSED,
}


def next_pass(action: a.Step, done: bool) -> float | None:
    """Seconds until the next pass after `action`, or None for the reconciler's default."""
    if isinstance(action, a.WaitForLearner):
        return LEARNER_CATCHING_UP if action.catching_up_for < NEW_LEARNER_WINDOW else None
    if isinstance(action, a.CreateMemberPod):
        return None if action.joined_before else POD_STARTING  # a restart waits as usual
    return (_AFTER_DONE if done else _AFTER_REFUSED).get(type(action))


def members_starting(action: a.Step, bootstrapped_at: float | None, now: float) -> bool:
    """Whether `action`, a wait, comes within BOOTSTRAP_WINDOW of this process starting a
    bootstrap's members (`bootstrapped_at`, on the same clock as `now`)."""
    return isinstance(action, a.Wait) and bootstrapped_at is not None and now - bootstrapped_at < BOOTSTRAP_WINDOW


def steady_interval(poll: float, ceiling: float, quiet_passes: int) -> float:
    """Seconds until the next pass after a Steady one: `poll` after a pass that wrote status,
    took or waited on a step (`quiet_passes` 0), then doubled with each further quiet pass
    (Steady again, nothing changed in status) up to `ceiling`. A member that is not healthy
    makes the plan Wait, never Steady."""
    return min(max(poll, ceiling), poll * float(1 << min(quiet_passes, 16)))
