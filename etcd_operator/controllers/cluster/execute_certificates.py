"""The cluster executor's PKI: issuing certificates into their Secrets, changing the CA
Secret during a rotation, keeping each leaf's trust bundle, and recording both in status."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Mapping
from typing import Any

from etcd_operator.clients.kube import client as kube
from etcd_operator.controllers.cluster.execute_context import NameCollision, NotYet, StepContext
from etcd_operator.controllers.cluster.tls_observer import read_secret, secret_bytes
from etcd_operator.core.cluster import certs, naming, ownership, pki
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.observed import Observed
from etcd_operator.core.cluster.spec import ClusterSpec
from etcd_operator.core.outcome import Outcome


async def record_transport(
    ctx: StepContext, action: a.RecordTransport, spec: ClusterSpec, observed: Observed
) -> Outcome:
    recorded = {"transport": action.transport}
    if action.peer_identity:
        recorded["peerIdentity"] = action.peer_identity
    return Outcome(True, status_fields={"tls": recorded})


async def record_peer_identity(
    ctx: StepContext, action: a.RecordPeerIdentity, spec: ClusterSpec, observed: Observed
) -> Outcome:
    ctx.post_event("Normal", "PeerIdentity", action.reason)
    return Outcome(True, status_fields={"tls": {"peerIdentity": action.common_name}})


async def issue_certificate(
    ctx: StepContext, action: a.IssueCertificate, spec: ClusterSpec, observed: Observed
) -> None:
    """Issues each certificate in order (the CA first when it is one of them). Leaves are
    signed by the CA as its Secret holds it: read live, or as this step created it."""
    ca_name = certs.secret_name(spec, ctx.cluster, certs.CertKind.CA)
    ca: dict[str, bytes] | None = None
    for value, reason in action.certificates:
        kind = certs.CertKind(value)
        request = certs.request_for(spec, ctx.cluster, ctx.namespace, kind, observed.cluster_domain)
        name = certs.secret_name(spec, ctx.cluster, kind)
        seen_absent = observed.tls.cert(kind) is None
        if kind == certs.CertKind.CA:
            data = await asyncio.to_thread(pki.new_ca, request, ctx.now)
        else:
            ca = ca or await read_secret(ctx.kube, ctx.namespace, ca_name)
            if ca is None:
                raise NotYet("the CA Secret is not readable yet")
            previous = None if seen_absent else await read_secret(ctx.kube, ctx.namespace, name)
            data = await asyncio.to_thread(pki.issue_leaf, request, ca, previous, ctx.now)
        written = await write_secret(ctx, name, data, create=seen_absent)
        if kind == certs.CertKind.CA:
            ca = written
        ctx.post_event("Normal", "CertificateIssued", f"Secret {name}: {reason}")


async def write_secret(
    ctx: StepContext,
    name: str,
    data: Mapping[str, bytes],
    create: bool = False,
    labels: Mapping[str, str] | None = None,
) -> dict[str, bytes]:
    """Writes a certificate Secret the operator owns (StepContext.apply: one that is not its
    own is never written, NameCollision). With `create`, it is only created: a Secret this
    pass saw absent is never written over, and one that appeared since ends the step (NotYet;
    the next pass looks at it). Returns the data as stored."""
    secret = ctx.owned(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {
                "name": name,
                "namespace": ctx.namespace,
                "labels": {**naming.selector_labels(ctx.cluster), **(labels or {})},
            },
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
        }
    )
    written: dict | None
    if not create:
        written = await ctx.apply(kube.SECRETS, secret)
    else:
        ctx.fence()
        try:
            written = await ctx.kube.create(kube.SECRETS, ctx.namespace, secret)
        except kube.Conflict:
            found = await ctx.kube.get(kube.SECRETS, ctx.namespace, name)
            why = found and ownership.foreign_reason(found["metadata"], ctx.cluster, ctx.token)
            if why:
                raise NameCollision("Secret", name, why) from None
            raise NotYet(f"Secret {name} appeared after this pass looked; the next pass reads it") from None
    if (data_written := secret_bytes(written)) is None:
        raise NotYet(f"Secret {name}: its namespace is gone")
    return data_written


async def record_rotation(ctx: StepContext, action: a.RecordRotation, spec: ClusterSpec, observed: Observed) -> Outcome:
    patch: dict[str, Any] = {"rotation": action.rotation.to_dict() if action.rotation else None}
    if action.finished:
        patch["rotated"] = {**observed.tls.rotated, action.finished[0]: action.finished[1]}
    ctx.post_event("Normal", "CertificateRotation", action.reason)
    return Outcome(True, status_fields={"tls": patch})


async def update_ca_secret(ctx: StepContext, action: a.UpdateCASecret, spec: ClusterSpec, observed: Observed) -> None:
    name = certs.secret_name(spec, ctx.cluster, certs.CertKind.CA)
    current = await read_secret(ctx.kube, ctx.namespace, name)
    if current is None:
        raise NotYet(f"the CA Secret {name} is not readable")
    request = certs.request_for(spec, ctx.cluster, ctx.namespace, certs.CertKind.CA)
    updated = await asyncio.to_thread(pki.change_ca, current, action.change, request, ctx.now)
    await write_secret(ctx, name, updated)
    ctx.post_event("Normal", "CertificateRotation", f"Secret {name}: {action.reason}")


async def sync_trust_bundle(ctx: StepContext, action: a.SyncTrustBundle, spec: ClusterSpec, observed: Observed) -> None:
    kind = certs.CertKind(action.certificate)
    ca = await read_secret(ctx.kube, ctx.namespace, certs.secret_name(spec, ctx.cluster, certs.CertKind.CA))
    name = certs.secret_name(spec, ctx.cluster, kind)
    leaf = await read_secret(ctx.kube, ctx.namespace, name)
    if ca is None or leaf is None:
        raise NotYet("the CA or leaf Secret is not readable")
    await write_secret(ctx, name, {**leaf, certs.CA_KEY: ca[certs.CA_KEY]})
