"""The cluster executor's authentication steps (cluster/auth.py plans them): etcd's users,
roles and auth switch through the leader, and the users' client certificate Secrets.
Passwords are read from their Secret at the moment they are sent, and never logged,
recorded or put in an event: status records the Secret's resourceVersion only."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import secrets

from etcd_operator.clients.etcd.client import EtcdError
from etcd_operator.clients.kube import client as kube
from etcd_operator.controllers.cluster.execute_certificates import write_secret
from etcd_operator.controllers.cluster.execute_context import NotYet, StepContext
from etcd_operator.controllers.cluster.tls_observer import read_secret
from etcd_operator.core.cluster import auth, certs, naming, pki
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.observed import Observed
from etcd_operator.core.cluster.spec import ClusterSpec, SecretKeyRef
from etcd_operator.core.outcome import Outcome


def _already_done(e: EtcdError, *phrases: str) -> bool:
    """etcd's message for a change an interrupted attempt already made: the step is done."""
    return any(p in e.detail for p in phrases)


async def _password(ctx: StepContext, ref: SecretKeyRef, version: str | None) -> str:
    secret = await ctx.kube.get(kube.SECRETS, ctx.namespace, ref.name)
    if secret is None:
        raise NotYet(f"Secret {ref.name} is gone")
    if version is not None and secret["metadata"].get("resourceVersion") != version:
        raise NotYet(f"Secret {ref.name} changed since this pass looked; the next pass reads it again")
    data = secret_value(secret, ref.key)
    if data is None:
        raise NotYet(f"Secret {ref.name} has no key {ref.key}")
    return data


def secret_value(secret: dict, key: str) -> str | None:
    raw = (secret.get("data") or {}).get(key)
    if raw is not None:
        return base64.b64decode(raw).decode()
    return (secret.get("stringData") or {}).get(key)


async def issue_user_certificate(
    ctx: StepContext, action: a.IssueUserCertificate, spec: ClusterSpec, observed: Observed
) -> None:
    ca = await read_secret(ctx.kube, ctx.namespace, certs.secret_name(spec, ctx.cluster, certs.CertKind.CA))
    if ca is None:
        raise NotYet("the CA Secret is not readable yet")
    name = certs.user_secret_name(ctx.cluster, action.user)
    seen_absent = action.user not in observed.auth.user_certs
    previous = None if seen_absent else await read_secret(ctx.kube, ctx.namespace, name)
    # Valid until the time status recorded before this step, never later (cluster/auth.py).
    lifetime = action.valid_until - ctx.now
    if lifetime <= 0:
        raise NotYet(f"the recorded validity of user {action.user}'s certificate has passed; recording it anew")
    request = dataclasses.replace(certs.user_request(spec, action.user), lifetime=lifetime)
    data = await asyncio.to_thread(pki.issue_leaf, request, ca, previous, ctx.now)
    await write_secret(ctx, name, data, create=seen_absent, labels={naming.LABEL_AUTH_USER: action.user})
    ctx.post_event("Normal", "UserCertificateIssued", action.reason)


async def record_user_certificate_bound(
    ctx: StepContext, action: a.RecordUserCertificateBound, spec: ClusterSpec, observed: Observed
) -> None:
    """Nothing to do but the status write that follows every pass (auth.next_record)."""


async def delete_user_certificate(
    ctx: StepContext, action: a.DeleteUserCertificate, spec: ClusterSpec, observed: Observed
) -> None:
    await ctx.delete(kube.SECRETS, "Secret", certs.user_secret_name(ctx.cluster, action.user))  # only its own
    ctx.post_event("Normal", "UserCertificateDeleted", action.reason)


async def add_auth_role(ctx: StepContext, action: a.AddAuthRole, spec: ClusterSpec, observed: Observed) -> None:
    try:
        await ctx.leader_client(observed).role_add(action.role)
    except EtcdError as e:
        if not _already_done(e, "already exists"):
            raise
    ctx.post_event("Normal", "AuthRoleAdded", action.reason)


async def grant_role_permission(
    ctx: StepContext, action: a.GrantRolePermission, spec: ClusterSpec, observed: Observed
) -> None:
    await ctx.leader_client(observed).role_grant_permission(action.role, action.permission)
    _post_change(ctx, action.drift, "AuthRoleUpdated", action.reason)


async def revoke_role_permission(
    ctx: StepContext, action: a.RevokeRolePermission, spec: ClusterSpec, observed: Observed
) -> None:
    p = action.permission
    try:
        await ctx.leader_client(observed).role_revoke_permission(action.role, p.key, p.range_end)
    except EtcdError as e:
        if not _already_done(e, "not granted"):
            raise
    _post_change(ctx, action.drift, "AuthRoleUpdated", action.reason)


async def delete_auth_role(ctx: StepContext, action: a.DeleteAuthRole, spec: ClusterSpec, observed: Observed) -> None:
    try:
        await ctx.leader_client(observed).role_delete(action.role)
    except EtcdError as e:
        if not _already_done(e, "not found"):
            raise
    ctx.post_event("Normal", "AuthRoleRemoved", action.reason)


async def add_auth_user(ctx: StepContext, action: a.AddAuthUser, spec: ClusterSpec, observed: Observed) -> Outcome:
    password = await _password(ctx, action.password, action.password_version) if action.password else None
    try:
        await ctx.leader_client(observed).user_add(action.user, password)
    except EtcdError as e:
        if not _already_done(e, "already exists"):
            raise
        if password is not None:  # added by an interrupted attempt: make sure of the password
            await ctx.leader_client(observed).user_change_password(action.user, password)
    ctx.post_event("Normal", "AuthUserAdded", action.reason)
    return _password_recorded(action.user, action.password_version if action.password else None)


async def change_user_password(
    ctx: StepContext, action: a.ChangeUserPassword, spec: ClusterSpec, observed: Observed
) -> Outcome:
    password = await _password(ctx, action.password, action.password_version)
    await ctx.leader_client(observed).user_change_password(action.user, password)
    ctx.post_event("Normal", "AuthPasswordChanged", action.reason)
    return _password_recorded(action.user, action.password_version)


async def clear_user_password(
    ctx: StepContext, action: a.ClearUserPassword, spec: ClusterSpec, observed: Observed
) -> Outcome:
    """A random password, sent once and kept nowhere: the old one stops working, and no one
    can log in with a password. Repeating it (an interrupted attempt) changes nothing else."""
    if action.user in auth.reserved_users(observed):
        raise ValueError(f"refusing to change the password of the operator's own user {action.user}")
    await ctx.leader_client(observed).user_change_password(action.user, secrets.token_urlsafe(32))
    ctx.post_event("Normal", "AuthPasswordCleared", action.reason)
    return Outcome(True, status_fields={"auth": {"passwordVersions": {action.user: None}}})


def _password_recorded(user: str, version: str | None) -> Outcome:
    if version is None:
        return Outcome(True)
    return Outcome(True, status_fields={"auth": {"passwordVersions": {user: version}}})


async def grant_user_role(ctx: StepContext, action: a.GrantUserRole, spec: ClusterSpec, observed: Observed) -> None:
    await ctx.leader_client(observed).user_grant_role(action.user, action.role)
    _post_change(ctx, action.drift, "AuthUserUpdated", action.reason)


async def revoke_user_role(ctx: StepContext, action: a.RevokeUserRole, spec: ClusterSpec, observed: Observed) -> None:
    if action.role == auth.ROOT and action.user in auth.reserved_users(observed):
        raise ValueError(f"refusing to revoke the root role from the operator's own user {action.user}")
    try:
        await ctx.leader_client(observed).user_revoke_role(action.user, action.role)
    except EtcdError as e:
        if not _already_done(e, "not granted"):
            raise
    _post_change(ctx, action.drift, "AuthUserUpdated", action.reason)


async def delete_auth_user(ctx: StepContext, action: a.DeleteAuthUser, spec: ClusterSpec, observed: Observed) -> None:
    if action.user in auth.reserved_users(observed):
        raise ValueError(f"refusing to remove the operator's own user {action.user}")
    try:
        await ctx.leader_client(observed).user_delete(action.user)
    except EtcdError as e:
        if not _already_done(e, "not found"):
            raise
    ctx.post_event("Normal", "AuthUserRemoved", action.reason)


async def enable_auth(ctx: StepContext, action: a.EnableAuth, spec: ClusterSpec, observed: Observed) -> None:
    """Enables authentication, then proves the operator's identity with an admin call
    through the same client certificate (UserList needs the root role once auth is on)."""
    client = ctx.leader_client(observed)
    roles = await client.user_roles(action.operator_user)
    if auth.ROOT not in roles:  # read back right before the switch: never lock the operator out
        raise NotYet(f"etcd user {action.operator_user} does not hold the root role")
    await client.auth_enable()
    try:
        enabled = await client.auth_status()
        await client.user_list()
    except EtcdError as e:
        ctx.post_event(
            "Warning",
            "AuthIdentityFailed",
            f"authentication was enabled, but the operator's admin call as {action.operator_user} failed: {e.detail}",
        )
        raise
    ctx.post_event(
        "Normal",
        "AuthEnabled",
        f"etcd authentication enabled (status: {'on' if enabled else 'off'}); the operator's admin call as "
        f"{action.operator_user} succeeded",
    )


async def disable_auth(ctx: StepContext, action: a.DisableAuth, spec: ClusterSpec, observed: Observed) -> None:
    await ctx.leader_client(observed).auth_disable()
    ctx.post_event("Normal", "AuthDisabled", action.reason)


def _post_change(ctx: StepContext, drift: bool, reason: str, message: str) -> None:
    if drift:
        ctx.post_event("Warning", "AuthDriftCorrected", f"{message} (etcd had drifted from spec.auth)")
    else:
        ctx.post_event("Normal", reason, message)
