"""Reads what spec.auth needs each pass: etcd's auth switch, users and roles (through the
leader, with the operator's client certificate), the resourceVersion of each password
Secret (never its data), and the users' client certificate Secrets."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from etcd_operator.clients.etcd.client import EtcdError
from etcd_operator.clients.etcd.pool import EtcdClientPool
from etcd_operator.clients.kube import client as kube
from etcd_operator.controllers.cluster.tls_observer import secret_bytes
from etcd_operator.core.cluster import naming, pki
from etcd_operator.core.cluster.certs import CertView, user_secret_name
from etcd_operator.core.cluster.observed import AuthView, EtcdView
from etcd_operator.core.cluster.recorded import AuthRecord
from etcd_operator.core.cluster.spec import ClusterSpec

AUTH_TIMEOUT = 5.0


async def observe_auth(
    kube_client: kube.KubeClient,
    etcd_clients: EtcdClientPool,
    body: Mapping[str, Any],
    spec: ClusterSpec,
    recorded: AuthRecord,
    etcd: EtcdView,
    serves_tls: bool,
) -> AuthView:
    """Nothing is read for a cluster without spec.auth and without a record of it."""
    if not spec.auth.declared and recorded == AuthRecord():
        return AuthView()
    namespace, cluster = body["metadata"]["namespace"], body["metadata"]["name"]
    wanted = {u.name for u in spec.auth.users if u.certificate} | set(recorded.certificate_users)
    certificates = await user_certificates(kube_client, namespace, cluster, wanted) if serves_tls else {}
    versions = await password_versions(kube_client, namespace, spec)
    view = await etcd_auth(etcd_clients, etcd)
    return AuthView(
        read=view.read,
        enabled=view.enabled,
        users=view.users,
        roles=view.roles,
        problem=view.problem,
        password_versions=versions,
        user_certs=certificates,
    )


async def etcd_auth(etcd_clients: EtcdClientPool, etcd: EtcdView) -> AuthView:
    leader = etcd.leader_id
    endpoint = etcd.endpoints.get(leader) if leader is not None else None
    if not endpoint:
        return AuthView(problem="no leader answered")
    client = etcd_clients.get(endpoint)
    try:
        async with asyncio.timeout(AUTH_TIMEOUT):
            enabled, users, roles = await asyncio.gather(client.auth_status(), client.user_list(), client.role_list())
            user_roles = await asyncio.gather(*(client.user_roles(u) for u in users))
            permissions = await asyncio.gather(*(client.role_permissions(r) for r in roles))
    except (TimeoutError, EtcdError) as e:
        return AuthView(problem=str(e) or type(e).__name__)
    return AuthView(
        read=True,
        enabled=enabled,
        users={u: tuple(sorted(r)) for u, r in zip(users, user_roles, strict=True)},
        roles={r: tuple(sorted(p)) for r, p in zip(roles, permissions, strict=True)},
    )


async def password_versions(kube_client: kube.KubeClient, namespace: str, spec: ClusterSpec) -> dict[str, str | None]:
    users = [u for u in spec.auth.users if u.password]
    names = [u.password.name for u in users if u.password]
    secrets = await asyncio.gather(*(kube_client.get(kube.SECRETS, namespace, name) for name in names))
    versions: dict[str, str | None] = {}
    for user, secret in zip(users, secrets, strict=True):
        has_key = secret is not None and user.password is not None and user.password.key in (secret.get("data") or {})
        versions[user.name] = secret["metadata"].get("resourceVersion") if secret is not None and has_key else None
    return versions


async def user_certificates(
    kube_client: kube.KubeClient, namespace: str, cluster: str, users: set[str]
) -> dict[str, CertView]:
    """The certificate Secrets of `users` that exist, read by name (the operator may not list
    Secrets); a Secret of that name that the operator did not label is not its own."""
    names = sorted(users)
    secrets = await asyncio.gather(
        *(kube_client.get(kube.SECRETS, namespace, user_secret_name(cluster, u)) for u in names)
    )
    found: dict[str, CertView] = {}
    for user, secret in zip(names, secrets, strict=True):
        labels = (secret or {}).get("metadata", {}).get("labels") or {}
        data = secret_bytes(secret)
        if data is not None and labels.get(naming.LABEL_AUTH_USER) == user:
            found[user] = await asyncio.to_thread(pki.describe, data)
    return found
