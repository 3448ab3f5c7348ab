"""A new TLS cluster's certificates, issued in one step by the executor against an in-memory
Secret store with the real cluster.pki: passes run until the first member is due, and an
operator killed before any API call of the step converges on the next passes without
replacing a Secret it, or anyone, already wrote."""

from __future__ import annotations

import asyncio
import base64
import copy
import dataclasses

import pytest

from etcd_operator.clients.kube import client as kube
from etcd_operator.controllers.cluster.executor import ClusterExecutor
from etcd_operator.core.cluster import certs, pacing, pki, tls_plan
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.certs import CertKind
from etcd_operator.core.cluster.decision import plan
from tests.unit.cluster_scenarios import NOW
from tests.unit.test_tls_plan import NEW, TLS_SPEC, new_cluster

BODY = {
    "apiVersion": "etcd.operator.dev/v1alpha1",
    "kind": "EtcdCluster",
    "metadata": {"name": "c", "namespace": "ns", "uid": "uid"},
}
NAMES = {kind: certs.secret_name(TLS_SPEC, "c", kind) for kind in certs.kinds_to_observe(TLS_SPEC)}


class Killed(Exception):
    """The operator died before this API call."""


class SecretStore:
    """The Secrets API as the executor uses it; `kill_at`: the call (0-based) the operator
    does not live to make."""

    def __init__(self, kill_at: int | None = None):
        self.secrets: dict[str, dict] = {}
        self.calls = 0
        self.kill_at = kill_at

    def _call(self) -> None:
        if self.calls == self.kill_at:
            raise Killed()
        self.calls += 1

    async def get(self, resource, namespace, name):
        self._call()
        return copy.deepcopy(self.secrets.get(name))

    async def create(self, resource, namespace, body):
        self._call()
        if body["metadata"]["name"] in self.secrets:
            raise kube.Conflict()
        return self._store(body)

    async def apply(self, resource, namespace, body):
        self._call()
        return self._store(body)

    def _store(self, body: dict) -> dict:
        self.secrets[body["metadata"]["name"]] = copy.deepcopy(body)
        return copy.deepcopy(body)

    def data(self, kind: CertKind) -> dict[str, bytes] | None:
        secret = self.secrets.get(NAMES[kind])
        return None if secret is None else {k: base64.b64decode(v) for k, v in secret["data"].items()}

    def fingerprint(self, kind: CertKind) -> str | None:
        data = self.data(kind)
        return None if data is None else pki.describe(data).fingerprint


def observe(store: SecretStore):
    """A new cluster whose status already records the peer identity (when that is recorded
    is tests/unit/test_tls_plan.py's concern): the first step after the certificates is the
    first member."""
    seen = new_cluster(
        tls_plan.HTTPS, {kind: None if (data := store.data(kind)) is None else pki.describe(data) for kind in NAMES}
    )
    return dataclasses.replace(seen, tls=dataclasses.replace(seen.tls, peer_identity=certs.PEER_COMMON_NAME))


def run_passes(store: SecretStore, events: list[str], before_step=None) -> list[a.Step]:
    """Passes until a step that is not a certificate's; returns every step taken."""
    steps = []
    while len(steps) < 10:
        seen = observe(store)
        action = plan(TLS_SPEC, NEW, seen, NOW).action
        steps.append(action)
        if not isinstance(action, a.IssueCertificate):
            return steps
        if before_step:
            before_step, hook = None, before_step
            hook(store)
        executor = ClusterExecutor(
            store, None, BODY, lambda kind, reason, message: events.append(message), status=NEW, now=NOW
        )
        outcome = asyncio.run(executor.run(action, TLS_SPEC, seen))
        assert outcome.retry_after == (pacing.CERTIFICATE_WRITTEN if outcome.done else None)
    raise AssertionError(f"no end to the certificate steps: {steps}")


def assert_chained_to_the_ca(store: SecretStore) -> None:
    ca = pki.describe(store.data(CertKind.CA))
    assert ca.is_ca and ca.problem is None
    for kind in certs.LEAVES:
        leaf = pki.describe(store.data(kind))
        assert leaf.problem is None and leaf.issuer_fingerprint == ca.fingerprint, kind


def test_a_new_cluster_gets_its_certificates_in_one_pass():
    store, events = SecretStore(), []
    steps = run_passes(store, events)
    assert [s.kind for s in steps] == ["IssueCertificate", "BootstrapFirstMember"]
    assert steps[0].kinds == ("ca", "member", "operator", "client")
    assert_chained_to_the_ca(store)
    assert len(events) == 4 and not any("PRIVATE KEY" in e or "BEGIN" in e for e in events)


# The CA created, then the three leaves created: the CA is taken as created (no read), and
# no leaf existed (no read of a previous key).
CLEAN_RUN_CALLS = 4


def test_the_clean_run_makes_the_calls_the_kill_table_covers():
    store = SecretStore()
    run_passes(store, [])
    assert store.calls == CLEAN_RUN_CALLS


@pytest.mark.parametrize("kill_at", range(CLEAN_RUN_CALLS))
def test_killed_before_any_call_the_next_passes_converge_and_keep_what_was_written(kill_at):
    store, events = SecretStore(kill_at=kill_at), []
    with pytest.raises(Killed):
        run_passes(store, events)
    written = {kind: store.fingerprint(kind) for kind in NAMES if store.data(kind) is not None}
    store.kill_at = None  # the operator restarts
    steps = run_passes(store, events)
    assert isinstance(steps[-1], a.BootstrapFirstMember) and len(steps) == 2  # one more certificate step
    assert_chained_to_the_ca(store)
    assert {kind: store.fingerprint(kind) for kind in written} == written  # nothing written was replaced


def test_a_ca_that_appears_after_the_pass_looked_is_not_written_over():
    theirs = pki.new_ca(certs.request_for(TLS_SPEC, "c", "ns", CertKind.CA), 1_000_000.0)

    def someone_creates_the_ca(store: SecretStore) -> None:
        store.secrets[NAMES[CertKind.CA]] = {
            "metadata": {"name": NAMES[CertKind.CA]},
            "data": {k: base64.b64encode(v).decode() for k, v in theirs.items()},
        }

    store, events = SecretStore(), []
    steps = run_passes(store, events, before_step=someone_creates_the_ca)
    assert [s.kinds for s in steps[:-1]] == [("ca", "member", "operator", "client"), ("member", "operator", "client")]
    assert isinstance(steps[-1], a.BootstrapFirstMember)
    assert store.data(CertKind.CA) == theirs
    assert_chained_to_the_ca(store)
