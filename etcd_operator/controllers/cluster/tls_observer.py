"""Reads a cluster's certificate Secrets: what they hold (for the planner, never the keys)
and the operator's own client credentials (for the etcd client pool)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import ssl
import tempfile
from collections.abc import Mapping
from typing import Any

from etcd_operator.clients.etcd.client import ClientTLS
from etcd_operator.clients.kube import client as kube
from etcd_operator.core.cluster import naming, ownership, pki
from etcd_operator.core.cluster.certs import (
    CA_KEY,
    CERT_KEY,
    PRIVATE_KEY_KEY,
    ROTATE_CA,
    ROTATE_LEAVES,
    CertKind,
    CertView,
    Rotation,
    TLSView,
    kinds_to_observe,
    secret_name,
)
from etcd_operator.core.cluster.spec import ISSUER_MANAGED, ClusterSpec

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
    return ClientTLS(
        ca=data[CA_KEY],
        cert=data[CERT_KEY],
        key=data[PRIVATE_KEY_KEY],
        server_name=naming.client_service_host(cluster, namespace),
    )


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


class TLSSecrets:
    """What a cluster's certificate Secrets hold, read live or reused from the last live read.
    Renewals are planned days ahead, so a steady pass may reuse a read from the last resync;
    a rotation in progress or requested is always read live."""

    def __init__(self) -> None:
        # (names, views, next CA, credentials, foreign Secrets)
        self._last: tuple[tuple, dict, Any, ClientTLS | None, dict[str, str]] | None = None

    async def observe(
        self, kube_client: kube.KubeClient, body: Mapping[str, Any], live: bool = True
    ) -> tuple[TLSView, ClientTLS | None]:
        meta, status = body["metadata"], body.get("status") or {}
        cluster = meta["name"]
        spec = ClusterSpec.from_dict(body.get("spec") or {})
        transport = recorded_transport(body)
        wanted = transport == HTTPS or (transport is None and spec.tls.enabled and not status.get("clusterID"))
        if not wanted:
            self._last = None
            return TLSView(transport=transport), None
        tls_status = status.get("tls") or {}
        annotations = meta.get("annotations") or {}
        rotation = Rotation.from_dict(tls_status.get("rotation"))
        requested = {
            kind: annotations[key]
            for kind, key in (
                (ROTATE_LEAVES, naming.ANNOTATION_ROTATE_CERTIFICATES),
                (ROTATE_CA, naming.ANNOTATION_ROTATE_CA),
            )
            if annotations.get(key)
        }
        kinds = kinds_to_observe(spec)
        names = (transport, tuple((k, secret_name(spec, cluster, k)) for k in kinds))
        # The move to a peer identity is read live too, as a rotation is.
        moving = spec.tls.issuer == ISSUER_MANAGED and not tls_status.get("peerIdentity")
        reusable = not live and rotation is None and not requested and not moving
        cached = self._last if reusable and self._last is not None and self._last[0] == names else None
        if cached is not None:
            _, views, next_ca, credentials, foreign = cached
        else:
            views, next_ca, credentials, foreign = await self._read(kube_client, body, spec, kinds, transport)
            self._last = (names, views, next_ca, credentials, foreign)
        return TLSView(
            transport=transport,
            certs=dict(views),
            next_ca=next_ca,
            rotation=rotation,
            requested=requested,
            rotated=dict(tls_status.get("rotated") or {}),
            foreign=dict(foreign),
            peer_identity=tls_status.get("peerIdentity") or None,
        ), credentials

    @staticmethod
    async def _read(
        kube_client: kube.KubeClient,
        body: Mapping[str, Any],
        spec: ClusterSpec,
        kinds: tuple[CertKind, ...],
        transport: str | None,
    ):
        meta = body["metadata"]
        cluster, namespace = meta["name"], meta["namespace"]
        raw = await asyncio.gather(
            *(kube_client.get(kube.SECRETS, namespace, secret_name(spec, cluster, k)) for k in kinds)
        )
        # The Managed issuer's Secrets are the operator's to write: one that is not its own is
        # reported, never written, and nothing is taken from it (cluster/ownership.py).
        # Provided Secrets (spec.tls.issuer: Secrets) are the user's, only read.
        foreign = {}
        if spec.tls.issuer == ISSUER_MANAGED:
            for secret in raw:
                why = None if secret is None else ownership.foreign_reason(secret["metadata"], cluster, meta["uid"])
                if secret is not None and why:
                    foreign[secret["metadata"]["name"]] = why
        secrets = [None if r is not None and r["metadata"]["name"] in foreign else secret_bytes(r) for r in raw]
        views: dict[CertKind, CertView | None] = {}
        for kind, data in zip(kinds, secrets, strict=True):
            views[kind] = None if data is None else await asyncio.to_thread(pki.describe, data)
        by_kind = dict(zip(kinds, secrets, strict=True))
        credentials = client_tls(cluster, namespace, by_kind.get(CertKind.OPERATOR)) if transport == HTTPS else None
        ca_data = by_kind.get(CertKind.CA)
        next_ca = await asyncio.to_thread(pki.describe_next_ca, ca_data) if ca_data else None
        return views, next_ca, credentials, foreign


async def served_certificates(
    pods: Mapping[str, Any], credentials: ClientTLS | None, timeout: float = 2.0
) -> dict[str, str] | None:
    """The fingerprint of the certificate each member serves on a new connection (pod name ->
    SHA-256), read with a TLS handshake; members that do not answer are left out."""
    if credentials is None:
        return None
    context = await asyncio.to_thread(_ssl_context, credentials)

    async def one(ip: str) -> str | None:
        try:
            _, writer = await asyncio.wait_for(
                asyncio.open_connection(ip, naming.CLIENT_PORT, ssl=context, server_hostname=credentials.server_name),
                timeout,
            )
        except (TimeoutError, OSError, ssl.SSLError):
            return None
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.close()
        return hashlib.sha256(der).hexdigest() if der else None

    names = [name for name, pod in pods.items() if pod.ip and not pod.deleting]
    results = await asyncio.gather(*(one(pods[name].ip) for name in names))
    return {name: fp for name, fp in zip(names, results, strict=True) if fp}


def _ssl_context(credentials: ClientTLS) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=credentials.ca.decode())
    with tempfile.TemporaryDirectory() as directory:  # ssl loads a client key from files only
        cert, key = f"{directory}/tls.crt", f"{directory}/tls.key"
        with open(cert, "wb") as f:
            f.write(credentials.cert)
        with open(key, "wb") as f:
            f.write(credentials.key)
        context.load_cert_chain(cert, key)
    return context
