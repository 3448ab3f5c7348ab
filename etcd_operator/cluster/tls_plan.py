"""TLS decisions for a cluster: which transport it serves, whether a spec.tls change can be
made, and the next certificate to issue or renew. Pure.

Invariants (tests/unit/test_tls_plan.py):
- a cluster keeps the transport it was created with; a cluster with members and no
  recorded transport predates TLS and is plaintext, whatever spec.tls says;
- the transport is recorded before anything else is done, so a cluster created with TLS is
  never mistaken for one that predates it (nor the other way round), restores included;
- a CA that running members trust is never replaced by a new one: a missing or unreadable
  CA Secret while members exist is a wait, not an issue;
- leaves are issued only from the CA in the CA Secret, and renewed once
  spec.tls.renewAtFraction of their lifetime has passed.
"""

from __future__ import annotations

from typing import Any

from etcd_operator.cluster import actions as a
from etcd_operator.cluster.certs import LEAVES, CertKind, member_dns_names, secret_name
from etcd_operator.cluster.observed import Observed
from etcd_operator.cluster.spec import ISSUER_MANAGED, ClusterSpec, SpecProblem
from etcd_operator.timefmt import format_time

HTTPS = "https"
HTTP = "http"


def transport(observed: Observed) -> str | None:
    """The transport the cluster serves: recorded, or plaintext for a cluster that has
    members but no record (it predates TLS); None for a cluster not created yet."""
    if observed.tls.transport:
        return observed.tls.transport
    if observed.bootstrapped or observed.pods:
        return HTTP
    return None


def transport_problem(spec: ClusterSpec, observed: Observed) -> SpecProblem | None:
    serving = transport(observed)
    if serving == HTTP and spec.tls.enabled:
        return SpecProblem(
            "TLSMigrationUnsupported",
            "spec.tls.enabled is true, but this cluster was created without TLS and serves plaintext; the operator "
            "does not switch a running cluster to TLS, and leaves it as it is. Set spec.tls.enabled: false, or "
            "restore a backup into a new cluster, which gets TLS")
    if serving == HTTPS and not spec.tls.enabled:
        return SpecProblem(
            "TLSDisableUnsupported",
            "spec.tls.enabled is false, but this cluster serves TLS; the operator does not switch a running cluster "
            "to plaintext, and keeps TLS. Set spec.tls.enabled: true")
    return None


def serves_tls(spec: ClusterSpec, observed: Observed) -> bool:
    """Whether the cluster acted on serves TLS: what runs, or the spec for a new cluster."""
    serving = transport(observed)
    return spec.tls.enabled if serving is None else serving == HTTPS


def serves_tls_observed(observed: Observed) -> bool:
    """Whether the members run (or, once recorded, are created) with TLS: for peer URLs."""
    return transport(observed) == HTTPS


def next_step(spec: ClusterSpec, observed: Observed) -> a.Action | None:
    """The certificate step to take before anything else, if any. `spec` is the acting spec."""
    if observed.tls.transport is None:
        if transport(observed) == HTTP:
            return a.RecordTransport("recording that this cluster, created before TLS, serves plaintext", HTTP)
        if spec.tls.enabled:
            return a.RecordTransport("recording that this new cluster serves TLS", HTTPS)
        return a.RecordTransport("recording that this new cluster serves plaintext (spec.tls.enabled: false)", HTTP)
    if not spec.tls.enabled:
        return None
    if spec.tls.issuer != ISSUER_MANAGED:
        return _wait_for_provided_secrets(spec, observed)
    ca = observed.tls.cert(CertKind.CA)
    if ca is None or ca.problem or not ca.is_ca:
        name = secret_name(spec, observed.cluster, CertKind.CA)
        if observed.pods:
            what = "is missing" if ca is None else f"is unusable ({ca.problem or 'not a CA'})"
            return a.Wait(f"the CA Secret {name} {what} while members run; the operator does not replace a CA the "
                          f"members trust. Restore the Secret from your backup of it")
        return a.IssueCertificate(f"creating the cluster's CA in Secret {name}", CertKind.CA.value)
    for kind in LEAVES:
        reason = _leaf_reason(spec, observed, kind, ca.fingerprint)
        if reason:
            return a.IssueCertificate(f"{secret_name(spec, observed.cluster, kind)}: {reason}", kind.value)
    return None


def _leaf_reason(spec: ClusterSpec, observed: Observed, kind: CertKind, ca_fingerprint: str) -> str | None:
    cert = observed.tls.cert(kind)
    if cert is None:
        return "issuing"
    if cert.problem:
        return f"reissuing ({cert.problem})"
    if cert.issuer_fingerprint != ca_fingerprint:
        return "reissuing from the cluster's CA (signed by another)"
    if ca_fingerprint not in cert.trusted:
        return "reissuing with the cluster's CA in ca.crt"
    if kind == CertKind.MEMBER and not set(member_dns_names(observed.cluster, observed.namespace)) <= set(cert.dns_names):
        return "reissuing with every member and Service name"
    if cert.renewal_due(spec.tls.renew_at_fraction, observed.now):
        return f"renewing ({spec.tls.renew_at_fraction:.0%} of its lifetime passed)"
    return None


def _wait_for_provided_secrets(spec: ClusterSpec, observed: Observed) -> a.Action | None:
    if observed.pods:
        return None  # members run on the files they mounted; a broken Secret shows in status
    for kind in (CertKind.MEMBER, CertKind.OPERATOR):
        cert = observed.tls.cert(kind)
        if cert is None or cert.problem:
            what = "to exist" if cert is None else f"to be usable ({cert.problem})"
            return a.Wait(f"waiting for Secret {secret_name(spec, observed.cluster, kind)} {what} "
                          f"(tls.crt, tls.key, ca.crt)")
    return None


def tls_status(spec: ClusterSpec, observed: Observed, recorded: str | None) -> dict[str, Any] | None:
    """status.tls: the transport and, per certificate, fingerprint prefix and expiry."""
    serving = recorded or observed.tls.transport
    if serving is None:
        return None
    certificates = {kind.value: {"secretName": secret_name(spec, observed.cluster, kind),
                                 "fingerprint": cert.fingerprint[:16], "notAfter": format_time(cert.not_after)}
                    for kind, cert in sorted(observed.tls.certs.items()) if cert is not None and not cert.problem}
    return {"transport": serving, "certificates": certificates}
