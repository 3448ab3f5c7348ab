"""etcd authentication for a cluster (spec.auth): the one next change to etcd's users, roles
and auth switch, the users' client certificates, the record of what the operator manages,
and the conditions that report it. Pure.

Invariants (tests/unit/test_cluster_auth.py):
- authentication is enabled only when the cluster serves TLS, the operator's client
  certificate names a user (its CN) that etcd holds with the root role, etcd's user `root`
  holds the root role too, and every declared user and role is in place: the operator never
  locks itself out, nor a declared tenant;
- the operator's own users (`root` and its certificate's CN) are never removed, and never
  lose the root role;
- only users and roles the operator manages (recorded in status.auth) are removed when they
  are no longer declared; others are reported (condition AuthInSync), never touched;
- authentication is turned off only by spec.auth.enabled: false, never by a missing block
  or a missing field (unset, the switch is left as found);
- one change per step; nothing while etcd's users and roles could not be read;
- revocation first: a managed user no longer declared is deleted from etcd, and a password
  no longer declared is replaced by a random one nobody holds, before any other change;
- a user certificate's validity is recorded in status before it is issued, and a removed
  name stays retired (not created in etcd, no certificate issued) until every certificate
  issued for it has expired, by this process's clock plus CLOCK_SKEW_MARGIN;
- a restore (snapshot or point in time) brings back the passwords etcd held at its snapshot,
  which status cannot describe: while it runs, every declared user's password version is
  recorded as RESTORED_PASSWORD, so that once the restored cluster runs each declared
  user's password is set again from its Secret, or replaced by a random one nobody holds
  when it declares none; a password rotated or removed after the snapshot never comes back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from etcd_operator.core import conditions as c
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster import tls_plan
from etcd_operator.core.cluster.certs import OPERATOR_COMMON_NAME, CertKind, CertView, user_secret_name
from etcd_operator.core.cluster.observed import EtcdPermission, Observed
from etcd_operator.core.cluster.recorded import AuthRecord, ClusterStatus
from etcd_operator.core.cluster.spec import (
    ACCESS_READ,
    ACCESS_WRITE,
    ISSUER_MANAGED,
    ClusterSpec,
    KeyPermission,
    RoleSpec,
)
from etcd_operator.core.timefmt import format_time

ROOT = "root"  # etcd's root user and role: both must exist for etcd to enable authentication
READ, WRITE, READWRITE = "READ", "WRITE", "READWRITE"
NOT_CONFIGURED = "spec.auth is not set: etcd's users, roles and authentication are left as they are"
NO_LEADER = "no leader answered"
SWITCH_LEFT_AS_FOUND = (
    "spec.auth.enabled is not set: the operator keeps the declared users and roles and leaves etcd's "
    "authentication switch as it found it (true turns it on, false off)"
)
# AuthInSync reasons a person must act on: posted as a Warning Event when they appear.
WARNING_REASONS = frozenset({"PasswordSecretMissing", "UnmanagedEntries", "NameRetired"})
# A certificate's NotAfter is compared with this process's clock only with this margin: a
# retired name is free again, and a certificate counts as too long-lived, only this long
# after the time says. Clocks of the operator's replicas must agree within it.
CLOCK_SKEW_MARGIN = 300.0
# status.auth.passwordVersions of a declared user while its cluster is restored: no Secret's
# resourceVersion, so the password is set (or cleared) again once the restored cluster runs.
RESTORED_PASSWORD = "restored"
# A certificate is issued valid until the time recorded before it, if that still leaves it
# at least this fraction of spec.auth.certificateLifetime; else the time is recorded anew.
RECORDED_LIFETIME_FRACTION = 0.9
STEPS = (
    a.RecordUserCertificateBound,
    a.IssueUserCertificate,
    a.DeleteUserCertificate,
    a.AddAuthRole,
    a.GrantRolePermission,
    a.RevokeRolePermission,
    a.DeleteAuthRole,
    a.AddAuthUser,
    a.ChangeUserPassword,
    a.ClearUserPassword,
    a.GrantUserRole,
    a.RevokeUserRole,
    a.DeleteAuthUser,
    a.EnableAuth,
    a.DisableAuth,
)


def prefix_end(key: bytes) -> bytes:
    """The range end that covers every key starting with `key` (etcd's clientv3.GetPrefixRangeEnd)."""
    end = bytearray(key)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"  # every key


def etcd_permissions(role: RoleSpec) -> dict[tuple[bytes, bytes], str]:
    """A declared role's permissions as etcd stores them, by (key, range end). Two entries
    for the same keys are one permission with both accesses."""
    wanted: dict[tuple[bytes, bytes], set[str]] = {}
    for p in role.permissions:
        key = p.key.encode()
        keys = (key, prefix_end(key) if p.prefix else b"")
        wanted.setdefault(keys, set()).update(_accesses(p))
    return {keys: READWRITE if len(types) == 2 else next(iter(types)) for keys, types in wanted.items()}


def _accesses(p: KeyPermission) -> set[str]:
    if p.access == ACCESS_READ:
        return {READ}
    if p.access == ACCESS_WRITE:
        return {WRITE}
    return {READ, WRITE}


def operator_user(observed: Observed) -> str | None:
    """etcd's user name for the operator: its client certificate's CN."""
    cert = observed.tls.cert(CertKind.OPERATOR)
    if cert is None or cert.problem or not cert.common_name:
        return None
    return cert.common_name


def reserved_users(observed: Observed) -> set[str]:
    return {ROOT, OPERATOR_COMMON_NAME, operator_user(observed) or OPERATOR_COMMON_NAME}


def next_step(spec: ClusterSpec, status: ClusterStatus, observed: Observed, now: float) -> a.Step | None:
    """The one next auth step, or None when etcd matches spec.auth. Called by the planner
    only for a healthy, settled cluster."""
    view = observed.auth
    step = revocation_step(spec, status, observed, now)
    if step:
        return step
    step = _certificate_step(spec, status, observed, now)
    if step or not spec.auth.declared:
        return step
    if not view.read:
        return a.Wait(f"etcd's users and roles could not be read: {view.problem or NO_LEADER}")
    if view.enabled and spec.auth.enabled is False:
        return a.DisableAuth("spec.auth.enabled is false: turning etcd's authentication off")
    if spec.auth.enabled:
        step = _identity_step(observed)
        if step:
            return step
    step = (
        _roles_step(spec, status, observed)
        or _users_step(spec, status, observed, now)
        or _removal_step(spec, status, observed)
    )
    if step:
        return step
    if spec.auth.enabled and not view.enabled:
        blocked = enable_blocker(spec, status, observed, now)
        if blocked:
            return a.Wait(f"authentication is not enabled yet: {blocked}")
        user = operator_user(observed) or ""
        return a.EnableAuth(f"every declared user and role is in place and the operator is etcd user {user}", user)
    return None


def _certificate_step(spec: ClusterSpec, status: ClusterStatus, observed: Observed, now: float) -> a.Step | None:
    if spec.tls.issuer != ISSUER_MANAGED or not tls_plan.serves_tls(spec, status, observed):
        return None
    wanted = {u.name for u in spec.auth.users if u.certificate} if spec.auth.declared else set()
    wanted -= set(retired_names(status, now))
    ca = observed.tls.cert(CertKind.CA)
    if ca is not None and not ca.problem and ca.is_ca:
        for user in sorted(wanted):
            why = _certificate_reason(spec, observed.auth.user_certs.get(user), ca, user, now)
            if why:
                return _issue(spec, status, observed, user, why, now)
    for user in sorted(set(observed.auth.user_certs) - wanted):
        return a.DeleteUserCertificate(
            f"Secret {user_secret_name(observed.cluster, user)}: user {user} no longer asks for a certificate", user
        )
    return None


def _issue(spec: ClusterSpec, status: ClusterStatus, observed: Observed, user: str, why: str, now: float) -> a.Step:
    """Issue a user's certificate valid until a time status already holds; else record that
    time first (the certificate is issued by the next pass)."""
    lifetime = spec.auth.certificate_lifetime
    wanted_until = now + lifetime
    recorded = status.auth.certificates_valid_until.get(user, 0.0)
    secret = user_secret_name(observed.cluster, user)
    if recorded < now + RECORDED_LIFETIME_FRACTION * lifetime:
        return a.RecordUserCertificateBound(
            f"Secret {secret}: {why}; first recording that it is valid until {format_time(wanted_until)}",
            user,
            wanted_until,
        )
    return a.IssueUserCertificate(f"Secret {secret}: {why}", user, min(recorded, wanted_until))


def _certificate_reason(spec: ClusterSpec, cert: CertView | None, ca: CertView, user: str, now: float) -> str | None:
    if cert is None:
        return f"issuing user {user}'s client certificate"
    if cert.problem:
        return f"reissuing ({cert.problem})"
    if cert.common_name != user:
        return f"reissuing with CN {user}"
    if cert.issuer_fingerprint != ca.fingerprint:
        return "reissuing from the cluster's CA (signed by another)"
    if cert.renewal_due(spec.tls.renew_at_fraction, now):
        return f"renewing ({spec.tls.renew_at_fraction:.0%} of its lifetime passed)"
    if cert.not_after > now + spec.auth.certificate_lifetime + CLOCK_SKEW_MARGIN:
        return f"reissuing: valid until {format_time(cert.not_after)}, longer than spec.auth.certificateLifetime"
    if set(cert.trusted) != set(ca.trusted):
        return "reissuing with the CA Secret's trust bundle"
    return None


def _identity_step(observed: Observed) -> a.Step | None:
    """etcd's root user, and the operator's own user, each without a password and with the
    root role. Added before authentication is enabled; kept afterwards."""
    users = observed.auth.users
    me = operator_user(observed)
    for name in (ROOT, *([me] if me else [])):
        if name not in users:
            return a.AddAuthUser(f"adding user {name} (no password) for the operator's own identity", name)
        if ROOT not in users[name]:
            return a.GrantUserRole(f"granting user {name} the root role: the operator's own identity", name, ROOT)
    return None


def _roles_step(spec: ClusterSpec, status: ClusterStatus, observed: Observed) -> a.Step | None:
    roles = observed.auth.roles
    managed = set(status.auth.managed_roles)
    for role in sorted(spec.auth.roles, key=lambda r: r.name):
        if role.name not in roles:
            return a.AddAuthRole(f"adding role {role.name}", role.name)
        have = {(p.key, p.range_end): p.perm_type for p in roles[role.name]}
        want = etcd_permissions(role)
        drift = role.name in managed
        for keys, perm_type in sorted(want.items()):
            if have.get(keys) != perm_type:
                permission = EtcdPermission(keys[0], keys[1], perm_type)
                return a.GrantRolePermission(
                    f"role {role.name}: granting {describe(permission)}", role.name, permission, drift
                )
        for keys, perm_type in sorted(have.items()):
            if keys not in want:
                permission = EtcdPermission(keys[0], keys[1], perm_type)
                return a.RevokeRolePermission(
                    f"role {role.name}: revoking {describe(permission)}", role.name, permission, drift
                )
    return None


def _users_step(spec: ClusterSpec, status: ClusterStatus, observed: Observed, now: float) -> a.Step | None:
    users = observed.auth.users
    managed = set(status.auth.managed_users)
    retired = retired_names(status, now)
    for user in sorted(spec.auth.users, key=lambda u: u.name):
        if user.name in reserved_users(observed):
            continue  # the operator's own identity (a CN from issuer Secrets the schema cannot know): never changed
        if user.name in retired:
            continue  # reported by the AuthInSync condition (NameRetired)
        version = observed.auth.password_versions.get(user.name) if user.password else None
        if user.password and version is None:
            continue  # reported by the AuthInSync condition; the others go on
        if user.name not in users:
            how = "with the password in its Secret" if user.password else "without a password (certificate CN)"
            return a.AddAuthUser(f"adding user {user.name} {how}", user.name, user.password, version)
        for role in user.roles:
            if role not in users[user.name]:
                return a.GrantUserRole(
                    f"granting user {user.name} role {role}", user.name, role, drift=user.name in managed
                )
        for role in users[user.name]:
            if role not in user.roles:
                return a.RevokeUserRole(
                    f"revoking role {role} from user {user.name}", user.name, role, drift=user.name in managed
                )
        if user.password and version is not None and status.auth.password_versions.get(user.name) != version:
            return a.ChangeUserPassword(
                f"user {user.name}: setting the password from Secret {user.password.name}",
                user.name,
                user.password,
                version,
            )
    return None


def revocation_step(spec: ClusterSpec, status: ClusterStatus, observed: Observed, now: float) -> a.Step | None:
    """Access that is no longer declared ends first: a managed user no longer declared (or
    declared again while its name is retired) is deleted, which also refuses its
    certificates at once (etcd finds no user for their CN); a password no longer declared
    is replaced by a random one (etcd keeps a user's no-password option as it was created).
    One write through the leader: the planner takes it whenever the cluster has a quorum,
    between member changes, without waiting for the cluster to settle."""
    if not spec.auth.declared or not observed.auth.read:
        return None
    retired = retired_names(status, now)
    declared = {u.name for u in spec.auth.users} - set(retired)
    reserved = reserved_users(observed)
    for user in sorted(set(status.auth.managed_users) - declared - reserved):
        if user in observed.auth.users:
            why = f"its name is retired until {format_time(retired[user])}" if user in retired else "no longer declared"
            return a.DeleteAuthUser(f"removing user {user}: {why} in spec.auth.users", user)
    for spec_user in sorted(spec.auth.users, key=lambda u: u.name):
        name = spec_user.name
        if not spec_user.password and name in status.auth.password_versions and name in observed.auth.users:
            if name not in reserved:
                return a.ClearUserPassword(
                    f"user {name}: passwordSecretRef was removed; replacing its password by a random one nobody holds",
                    name,
                )
    return None


def retired_names(status: ClusterStatus, now: float) -> dict[str, float]:
    """Removed names a certificate may still authenticate as, with the time it expires:
    declared again before that time + CLOCK_SKEW_MARGIN, they are not created in etcd."""
    return {u: t for u, t in status.auth.retired_users.items() if now <= t + CLOCK_SKEW_MARGIN}


def _removal_step(spec: ClusterSpec, status: ClusterStatus, observed: Observed) -> a.Step | None:
    declared_roles = {r.name for r in spec.auth.roles}
    for role in sorted(set(status.auth.managed_roles) - declared_roles - {ROOT}):
        if role in observed.auth.roles:
            return a.DeleteAuthRole(f"removing role {role}: no longer declared in spec.auth.roles", role)
    return None


def enable_blocker(spec: ClusterSpec, status: ClusterStatus, observed: Observed, now: float) -> str | None:
    """Why authentication may not be enabled yet; None when it may."""
    if not tls_plan.serves_tls(spec, status, observed):
        return "the cluster does not serve TLS: the operator's identity is its client certificate"
    me = operator_user(observed)
    if me is None:
        return "the operator's client certificate (and so its etcd user name) could not be read"
    users = observed.auth.users
    for name in (ROOT, me):
        if ROOT not in users.get(name, ()):
            return f"etcd user {name} does not hold the root role yet"
    retired = set(retired_names(status, now))  # reported by NameRetired; its tenant waits, the others need not
    missing = sorted({u.name for u in spec.auth.users} - set(users) - retired) + sorted(
        {r.name for r in spec.auth.roles} - set(observed.auth.roles)
    )
    if missing:
        return f"declared users or roles are not in etcd yet: {', '.join(missing)}"
    return None


def describe(p: EtcdPermission) -> str:
    access = {READ: "read", WRITE: "write", READWRITE: "read-write"}.get(p.perm_type, p.perm_type)
    key = p.key.decode(errors="replace")
    if not p.range_end:
        return f"{access} on key {key}"
    if p.range_end == prefix_end(p.key):
        return f"{access} on prefix {key}"
    return f"{access} on keys [{key}, {p.range_end.decode(errors='replace')})"


def foreign(spec: ClusterSpec, status: ClusterStatus, observed: Observed) -> tuple[list[str], list[str]]:
    """etcd's users and roles that are neither declared, managed nor the operator's own."""
    if not observed.auth.read:
        return [], []
    users = set(observed.auth.users) - {u.name for u in spec.auth.users} - set(status.auth.managed_users)
    roles = set(observed.auth.roles) - {r.name for r in spec.auth.roles} - set(status.auth.managed_roles)
    return sorted(users - reserved_users(observed)), sorted(roles - {ROOT})


def next_record(spec: ClusterSpec, status: ClusterStatus, observed: Observed, action: a.Step, now: float) -> AuthRecord:
    """status.auth after this pass: a user or role is managed once it is declared and in etcd
    (or added by this pass's step), and stays managed until it is gone from etcd. Password
    versions are those of users still declared with a password, and of users whose password
    is still to be cleared; the executor adds the one a step set, or drops the one it
    cleared (merge_password_version). Certificate times: see certificate_times."""
    record = status.auth
    issued, retired = certificate_times(spec, status, observed, action, now)
    if observed.restoring:
        reserved = reserved_users(observed)
        restored = {u.name: RESTORED_PASSWORD for u in spec.auth.users if u.name not in reserved}
        record = dataclasses.replace(record, password_versions=restored)
    if not observed.auth.read or observed.restoring:
        return dataclasses.replace(
            record,
            certificate_users=certificate_users(observed, action),
            certificates_valid_until=issued,
            retired_users=retired,
        )
    users = _managed(record.managed_users, (u.name for u in spec.auth.users), observed.auth.users)
    roles = _managed(record.managed_roles, (r.name for r in spec.auth.roles), observed.auth.roles)
    if isinstance(action, a.AddAuthUser) and action.user not in reserved_users(observed):
        users.add(action.user)
    if isinstance(action, a.AddAuthRole):
        roles.add(action.role)
    declared = {u.name for u in spec.auth.users}
    keep = declared & set(observed.auth.users)  # with a password, or without one still to be cleared
    versions = {u: v for u, v in record.password_versions.items() if u in keep}
    return AuthRecord(
        tuple(sorted(users - reserved_users(observed))),
        tuple(sorted(roles - {ROOT})),
        versions,
        certificate_users(observed, action),
        issued,
        retired,
    )


def certificate_times(
    spec: ClusterSpec, status: ClusterStatus, observed: Observed, action: a.Step, now: float
) -> tuple[dict[str, float], dict[str, float]]:
    """Until when a certificate issued for each declared user may be valid (the latest of
    what was recorded, what its Secret holds, and what this pass's step records or issues),
    and the retired names: a name no longer declared keeps its time there until it has
    passed by CLOCK_SKEW_MARGIN."""
    issued = dict(status.auth.certificates_valid_until)
    retired = dict(status.auth.retired_users)
    seen = {u: c.not_after for u, c in observed.auth.user_certs.items() if c.not_after > 0}
    if isinstance(action, a.RecordUserCertificateBound | a.IssueUserCertificate):
        seen[action.user] = max(seen.get(action.user, 0.0), action.valid_until)
    for user, until in seen.items():
        issued[user] = max(issued.get(user, 0.0), until)
    declared = {u.name for u in spec.auth.users} if spec.auth.declared else set()
    for user in sorted(set(issued) - declared):
        retired[user] = max(retired.get(user, 0.0), issued.pop(user))
    return issued, {u: t for u, t in retired.items() if now <= t + CLOCK_SKEW_MARGIN}


def certificate_users(observed: Observed, action: a.Step) -> tuple[str, ...]:
    """The users whose certificate Secret exists (or is issued by this pass's step): the
    Secrets the next pass reads, so that one whose user is gone is found and deleted."""
    users = set(observed.auth.user_certs)
    if isinstance(action, a.IssueUserCertificate):
        users.add(action.user)
    return tuple(sorted(users))


def _managed(recorded: Iterable[str], declared: Iterable[str], existing: Iterable[str]) -> set[str]:
    return (set(recorded) | set(declared)) & set(existing)


def status_record(record: AuthRecord, patch: dict[str, Any] | None, previous: AuthRecord) -> dict[str, Any]:
    """status.auth as written: this pass's record and the password version its step set or
    cleared (None). A version no longer kept is written as null: status is a merge patch,
    which removes a key only when it is null."""
    written = record.to_dict()
    versions = written["passwordVersions"]
    for user, version in ((patch or {}).get("passwordVersions") or {}).items():
        if version is None:
            versions.pop(user, None)
        else:
            versions[user] = version
    for user in previous.password_versions:
        versions.setdefault(user, None)
    return written


def conditions(
    spec: ClusterSpec, status: ClusterStatus, observed: Observed, action: a.Step, now: float
) -> list[c.Condition]:
    return [
        enabled_condition(spec, status, observed, action, now),
        in_sync_condition(spec, status, observed, action, now),
    ]


def enabled_condition(
    spec: ClusterSpec, status: ClusterStatus, observed: Observed, action: a.Step, now: float
) -> c.Condition:
    view = observed.auth
    if not spec.auth.declared:
        return c.Condition("AuthEnabled", False, "NotConfigured", NOT_CONFIGURED)
    if not view.read:
        return c.Condition(
            "AuthEnabled",
            None,
            "Unknown",
            f"etcd's authentication state could not be read: {view.problem or NO_LEADER}",
        )
    if view.enabled and spec.auth.enabled is None:
        return c.Condition("AuthEnabled", True, "LeftAsFound", SWITCH_LEFT_AS_FOUND)
    if view.enabled and spec.auth.enabled:
        me = operator_user(observed) or OPERATOR_COMMON_NAME
        return c.Condition(
            "AuthEnabled",
            True,
            "IdentityVerified",
            f"etcd authentication is on; the operator acts as etcd user {me} (its client certificate's CN, "
            f"with the root role) and read etcd's users and roles with it in this pass",
        )
    if view.enabled:
        return c.Condition("AuthEnabled", True, "Disabling", "spec.auth.enabled is false: turning authentication off")
    if spec.auth.enabled is None:
        return c.Condition("AuthEnabled", False, "LeftAsFound", SWITCH_LEFT_AS_FOUND)
    if not spec.auth.enabled:
        return c.Condition(
            "AuthEnabled",
            False,
            "AuthDisabled",
            "spec.auth.enabled is false: etcd does not check users or permissions; any client with a certificate "
            "of the cluster's CA may read and write every key",
        )
    blocked = enable_blocker(spec, status, observed, now)
    why = action.reason if isinstance(action, STEPS) else (blocked or "waiting for the cluster to be healthy")
    return c.Condition("AuthEnabled", False, "Enabling", f"authentication is enabled once this is done: {why}")


def in_sync_condition(
    spec: ClusterSpec, status: ClusterStatus, observed: Observed, action: a.Step, now: float
) -> c.Condition:
    if not spec.auth.declared:
        return c.Condition("AuthInSync", True, "NotConfigured", "")
    if not observed.auth.read:
        return c.Condition("AuthInSync", None, "Unknown", observed.auth.problem or NO_LEADER)
    missing = [
        f"{u.name} (Secret {u.password.name} or its key {u.password.key} is missing)"
        for u in spec.auth.users
        if u.password and observed.auth.password_versions.get(u.name) is None
    ]
    if missing:
        return c.Condition("AuthInSync", False, "PasswordSecretMissing", f"users not set up: {'; '.join(missing)}")
    retired = retired_names(status, now)
    waiting = sorted(u.name for u in spec.auth.users if u.name in retired)
    if waiting:
        names = "; ".join(
            f"{u} (until {format_time(retired[u] + CLOCK_SKEW_MARGIN)}: a certificate issued for it is valid until "
            f"{format_time(retired[u])})"
            for u in waiting
        )
        return c.Condition(
            "AuthInSync",
            False,
            "NameRetired",
            f"users not created: their names were removed while a certificate issued for them can still "
            f"authenticate, and would act as the new user: {names}; declare another name, or wait",
        )
    users, roles = foreign(spec, status, observed)
    if users or roles:
        found = [*(f"user {u}" for u in users), *(f"role {r}" for r in roles)]
        return c.Condition(
            "AuthInSync",
            False,
            "UnmanagedEntries",
            f"etcd holds {', '.join(found)}, neither declared in spec.auth nor created by the operator; they are "
            f"left as they are: declare them to manage them, or remove them with etcdctl",
        )
    if isinstance(action, STEPS):
        return c.Condition("AuthInSync", False, "Reconciling", action.reason)
    return c.Condition("AuthInSync", True, "InSync", "etcd's users and roles match spec.auth")
