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
- one change per step; nothing while etcd's users and roles could not be read.
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

ROOT = "root"  # etcd's root user and role: both must exist for etcd to enable authentication
READ, WRITE, READWRITE = "READ", "WRITE", "READWRITE"
NOT_CONFIGURED = "spec.auth is not set: etcd's users, roles and authentication are left as they are"
NO_LEADER = "no leader answered"
SWITCH_LEFT_AS_FOUND = (
    "spec.auth.enabled is not set: the operator keeps the declared users and roles and leaves etcd's "
    "authentication switch as it found it (true turns it on, false off)"
)
# AuthInSync reasons a person must act on: posted as a Warning Event when they appear.
WARNING_REASONS = frozenset({"PasswordSecretMissing", "UnmanagedEntries"})
STEPS = (
    a.IssueUserCertificate,
    a.DeleteUserCertificate,
    a.AddAuthRole,
    a.GrantRolePermission,
    a.RevokeRolePermission,
    a.DeleteAuthRole,
    a.AddAuthUser,
    a.ChangeUserPassword,
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
    step = _certificate_step(spec, status, observed, now)
    if step or not spec.auth.declared:
        return step
    view = observed.auth
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
        or _users_step(spec, status, observed)
        or _removal_step(spec, status, observed)
    )
    if step:
        return step
    if spec.auth.enabled and not view.enabled:
        blocked = enable_blocker(spec, status, observed)
        if blocked:
            return a.Wait(f"authentication is not enabled yet: {blocked}")
        user = operator_user(observed) or ""
        return a.EnableAuth(f"every declared user and role is in place and the operator is etcd user {user}", user)
    return None


def _certificate_step(spec: ClusterSpec, status: ClusterStatus, observed: Observed, now: float) -> a.Step | None:
    if spec.tls.issuer != ISSUER_MANAGED or not tls_plan.serves_tls(spec, status, observed):
        return None
    wanted = {u.name for u in spec.auth.users if u.certificate} if spec.auth.declared else set()
    ca = observed.tls.cert(CertKind.CA)
    if ca is not None and not ca.problem and ca.is_ca:
        for user in sorted(wanted):
            why = _certificate_reason(spec, observed.auth.user_certs.get(user), ca, user, now)
            if why:
                return a.IssueUserCertificate(f"Secret {user_secret_name(observed.cluster, user)}: {why}", user)
    for user in sorted(set(observed.auth.user_certs) - wanted):
        return a.DeleteUserCertificate(
            f"Secret {user_secret_name(observed.cluster, user)}: user {user} no longer asks for a certificate", user
        )
    return None


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


def _users_step(spec: ClusterSpec, status: ClusterStatus, observed: Observed) -> a.Step | None:
    users = observed.auth.users
    managed = set(status.auth.managed_users)
    for user in sorted(spec.auth.users, key=lambda u: u.name):
        if user.name in reserved_users(observed):
            continue  # the operator's own identity (a CN from issuer Secrets the schema cannot know): never changed
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


def _removal_step(spec: ClusterSpec, status: ClusterStatus, observed: Observed) -> a.Step | None:
    declared_users = {u.name for u in spec.auth.users}
    declared_roles = {r.name for r in spec.auth.roles}
    for user in sorted(set(status.auth.managed_users) - declared_users - reserved_users(observed)):
        if user in observed.auth.users:
            return a.DeleteAuthUser(f"removing user {user}: no longer declared in spec.auth.users", user)
    for role in sorted(set(status.auth.managed_roles) - declared_roles - {ROOT}):
        if role in observed.auth.roles:
            return a.DeleteAuthRole(f"removing role {role}: no longer declared in spec.auth.roles", role)
    return None


def enable_blocker(spec: ClusterSpec, status: ClusterStatus, observed: Observed) -> str | None:
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
    missing = sorted({u.name for u in spec.auth.users} - set(users)) + sorted(
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


def next_record(spec: ClusterSpec, status: ClusterStatus, observed: Observed, action: a.Step) -> AuthRecord:
    """status.auth after this pass: a user or role is managed once it is declared and in etcd
    (or added by this pass's step), and stays managed until it is gone from etcd. Password
    versions are those of users still declared with a password; the executor adds the one
    a step set (merge_password_version)."""
    record = status.auth
    if not observed.auth.read:
        return dataclasses.replace(record, certificate_users=certificate_users(observed, action))
    users = _managed(record.managed_users, (u.name for u in spec.auth.users), observed.auth.users)
    roles = _managed(record.managed_roles, (r.name for r in spec.auth.roles), observed.auth.roles)
    if isinstance(action, a.AddAuthUser) and action.user not in reserved_users(observed):
        users.add(action.user)
    if isinstance(action, a.AddAuthRole):
        roles.add(action.role)
    with_password = {u.name for u in spec.auth.users if u.password} & set(observed.auth.users)
    versions = {u: v for u, v in record.password_versions.items() if u in with_password}
    return AuthRecord(
        tuple(sorted(users - reserved_users(observed))),
        tuple(sorted(roles - {ROOT})),
        versions,
        certificate_users(observed, action),
    )


def certificate_users(observed: Observed, action: a.Step) -> tuple[str, ...]:
    """The users whose certificate Secret exists (or is issued by this pass's step): the
    Secrets the next pass reads, so that one whose user is gone is found and deleted."""
    users = set(observed.auth.user_certs)
    if isinstance(action, a.IssueUserCertificate):
        users.add(action.user)
    return tuple(sorted(users))


def _managed(recorded: Iterable[str], declared: Iterable[str], existing: Iterable[str]) -> set[str]:
    return (set(recorded) | set(declared)) & set(existing)


def status_record(record: AuthRecord, patch: dict[str, Any] | None) -> dict[str, Any]:
    """status.auth as written: this pass's record and the password version its step set."""
    written = record.to_dict()
    written["passwordVersions"].update((patch or {}).get("passwordVersions") or {})
    return written


def conditions(spec: ClusterSpec, status: ClusterStatus, observed: Observed, action: a.Step) -> list[c.Condition]:
    return [enabled_condition(spec, status, observed, action), in_sync_condition(spec, status, observed, action)]


def enabled_condition(spec: ClusterSpec, status: ClusterStatus, observed: Observed, action: a.Step) -> c.Condition:
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
    blocked = enable_blocker(spec, status, observed)
    why = action.reason if isinstance(action, STEPS) else (blocked or "waiting for the cluster to be healthy")
    return c.Condition("AuthEnabled", False, "Enabling", f"authentication is enabled once this is done: {why}")


def in_sync_condition(spec: ClusterSpec, status: ClusterStatus, observed: Observed, action: a.Step) -> c.Condition:
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
