"""Reads a cluster's certificate Secrets: what they hold (for the planner, never the keys)
and the operator's own client credentials (for the etcd client pool)."""

from __future__ import annotations

import asyncio
import base64
from typing import Any, Mapping

from etcd_operator.cluster import naming, pki
from etcd_operator.cluster.certs import (CA_KEY, CERT_KEY, PRIVATE_KEY_KEY, CertKind, CertView, TLSView,
                                         kinds_to_observe, secret_name)
from etcd_operator.cluster.spec import ClusterSpec
from etcd_operator.etcd.client import ClientTLS
from etcd_operator.kube import client as kube

HTTPS = "https"


def secret_bytes(secret: Mapping[str, Any] | None) -> dict[str, bytes] | None:
    if secret is None:
        return None
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}


def recorded_transport(body: Mapping[str, Any]) -> str | None:
    return ((body.get("status") or {}).get("tls") or {}).get("transport")


def client_tls(cluster: str, namespace: str, data: Mapping[str, bytes] | None) -> ClientTLS | None:
    if not data or not all(k in data for k in (CERT_KEY, PRIVATE_KEY_KEY, CA_KEY)):
        return None
    return ClientTLS(ca=data[CA_KEY], cert=data[CERT_KEY], key=data[PRIVATE_KEY_KEY],
                     server_name=naming.client_service_host(cluster, namespace))


async def read_secret(kube_client: kube.KubeClient, namespace: str, name: str) -> dict[str, bytes] | None:
    return secret_bytes(await kube_client.get(kube.SECRETS, namespace, name))


async def operator_credentials(kube_client: kube.KubeClient, body: Mapping[str, Any]) -> ClientTLS | None:
    """The operator's client credentials for a cluster that serves TLS; None for plaintext."""
    if recorded_transport(body) != HTTPS:
        return None
    meta = body["metadata"]
    spec = ClusterSpec.from_dict(body.get("spec") or {})
    data = await read_secret(kube_client, meta["namespace"], secret_name(spec, meta["name"], CertKind.OPERATOR))
    return client_tls(meta["name"], meta["namespace"], data)


async def observe_tls(kube_client: kube.KubeClient, body: Mapping[str, Any]) -> tuple[TLSView, ClientTLS | None]:
    meta, status = body["metadata"], body.get("status") or {}
    cluster, namespace = meta["name"], meta["namespace"]
    spec = ClusterSpec.from_dict(body.get("spec") or {})
    transport = recorded_transport(body)
    wanted = transport == HTTPS or (transport is None and spec.tls.enabled and not status.get("clusterID"))
    if not wanted:
        return TLSView(transport=transport), None
    kinds = kinds_to_observe(spec)
    secrets = await asyncio.gather(*(read_secret(kube_client, namespace, secret_name(spec, cluster, k))
                                     for k in kinds))
    views: dict[CertKind, CertView | None] = {}
    for kind, data in zip(kinds, secrets):
        views[kind] = None if data is None else await asyncio.to_thread(pki.describe, data)
    operator_data = dict(zip(kinds, secrets)).get(CertKind.OPERATOR)
    credentials = client_tls(cluster, namespace, operator_data) if transport == HTTPS else None
    return TLSView(transport=transport, certs=views), credentials
