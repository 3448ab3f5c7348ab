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
from etcd_operator.controllers.cluster.tls_observer import TLSSecrets
from etcd_operator.core.cluster import certs, naming, ownership, pacing, pki, tls_plan
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
    """The Secrets API as the executor uses it, with the API server's preconditions on an
    apply (resourceVersion, uid); `kill_at`: the call (0-based) the operator does not live to
    make. The observer's reads (`observer`) are not counted: the kill table is the step's."""

    def __init__(self, kill_at: int | None = None):
        self.secrets: dict[str, dict] = {}
        self.calls = 0
        self.kill_at = kill_at
        self.versions = 0
        self.observer = _Unmetered(self)

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
        return self._store(body, f"uid-{body['metadata']['name']}")

    async def apply(self, resource, namespace, body):
        self._call()
        meta, current = body["metadata"], self.secrets.get(body["metadata"]["name"])
        if "resourceVersion" in meta and (
            current is None
            or current["metadata"]["resourceVersion"] != meta["resourceVersion"]
            or current["metadata"]["uid"] != meta.get("uid", current["metadata"]["uid"])
        ):
            raise kube.Conflict()
        return self._store(body, current["metadata"]["uid"] if current else f"uid-{meta['name']}")

    async def delete(self, resource, namespace, name, uid=None, grace_period=None):
        self._call()
        current = self.secrets.get(name)
        if current is None or (uid and current["metadata"]["uid"] != uid):
            return False
        del self.secrets[name]
        return True

    def put(self, name: str, data: dict[str, bytes], **metadata) -> None:
        """Someone else writes the Secret `name` as they like (no label, no owner unless given)."""
        self._store({"metadata": {"name": name, **metadata}, "data": _encoded(data)}, f"theirs-{name}")

    def _store(self, body: dict, uid: str) -> dict:
        self.versions += 1
        stored = copy.deepcopy(body)
        stored["metadata"].update(uid=uid, resourceVersion=str(self.versions))
        self.secrets[body["metadata"]["name"]] = stored
        return copy.deepcopy(stored)

    def data(self, kind: CertKind) -> dict[str, bytes] | None:
        secret = self.secrets.get(NAMES[kind])
        return None if secret is None else {k: base64.b64decode(v) for k, v in secret["data"].items()}

    def fingerprint(self, kind: CertKind) -> str | None:
        data = self.data(kind)
        return None if data is None else pki.describe(data).fingerprint


class _Unmetered:
    def __init__(self, store: SecretStore):
        self.store = store

    async def get(self, resource, namespace, name):
        return copy.deepcopy(self.store.secrets.get(name))


def _encoded(data: dict[str, bytes]) -> dict[str, str]:
    return {k: base64.b64encode(v).decode() for k, v in data.items()}


# The EtcdCluster as the observer reads it: a new cluster whose TLS transport is recorded.
OBSERVED_BODY = {**BODY, "spec": {"size": 3, "tls": {}}, "status": {"tls": {"transport": "https"}}}


def observe(store: SecretStore):
    """What the real observer (cluster/tls_observer.py) reads of the store, in a new cluster
    whose status already records the peer identity (when that is recorded is
    tests/unit/test_tls_plan.py's concern): the first step after the certificates is the first
    member."""
    tls, _ = asyncio.run(TLSSecrets().observe(store.observer, OBSERVED_BODY))
    seen = dataclasses.replace(new_cluster(tls_plan.HTTPS), tls=tls)
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
    assert [s.kind for s in steps] == ["IssueCertificate", "BootstrapMembers"]
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
    assert isinstance(steps[-1], a.BootstrapMembers) and len(steps) == 2  # one more certificate step
    assert_chained_to_the_ca(store)
    assert {kind: store.fingerprint(kind) for kind in written} == written  # nothing written was replaced


def _decide(store: SecretStore):
    return plan(TLS_SPEC, NEW, observe(store), NOW)


def _owned_condition(decision):
    return next(c for c in decision.conditions if c.type == ownership.CONDITION)


def test_a_ca_that_appears_after_the_pass_looked_is_neither_written_over_nor_adopted():
    theirs = pki.new_ca(certs.request_for(TLS_SPEC, "c", "ns", CertKind.CA), 1_000_000.0)

    def someone_creates_the_ca(store: SecretStore) -> None:
        store.put(NAMES[CertKind.CA], theirs)

    store, events = SecretStore(), []
    steps = run_passes(store, events, before_step=someone_creates_the_ca)
    assert [s.kind for s in steps] == ["IssueCertificate", "Wait"]
    assert f"Secret {NAMES[CertKind.CA]} exists and is not this cluster's" in steps[-1].reason
    assert store.data(CertKind.CA) == theirs
    assert all(store.data(kind) is None for kind in certs.LEAVES)  # nothing signed by their CA
    condition = _owned_condition(_decide(store))
    assert (condition.status, condition.reason) == (False, ownership.FOREIGN_SECRET)


OURS = {"labels": {naming.LABEL_CLUSTER: "c"}}
OWNED = {"ownerReferences": [{"kind": "EtcdCluster", "name": "c", "uid": "uid", "controller": True}]}
ANOTHER_CLUSTER = {"ownerReferences": [{"kind": "EtcdCluster", "name": "c", "uid": "old-uid", "controller": True}]}


@pytest.mark.parametrize("kind", list(NAMES))
@pytest.mark.parametrize(
    "metadata",
    [
        {},  # another application's Secret
        OURS,  # the label alone
        OWNED,  # the owner alone
        {**OURS, **ANOTHER_CLUSTER},  # a deleted EtcdCluster of the same name's (orphaned)
    ],
    ids=["unlabelled", "label-only", "owner-only", "another-uid"],
)
def test_a_foreign_secret_of_a_certificate_name_stops_the_certificates_and_is_left_as_it_was(kind, metadata):
    store, events = SecretStore(), []
    store.put(NAMES[kind], {"password": b"another application's"}, **copy.deepcopy(metadata))
    before = copy.deepcopy(store.secrets)
    steps = run_passes(store, events)
    assert [s.kind for s in steps] == ["Wait"]
    assert store.secrets == before and store.calls == 0  # nothing written, nothing else issued
    condition = _owned_condition(_decide(store))
    assert (condition.status, condition.reason) == (False, ownership.FOREIGN_SECRET)
    assert f"Secret {NAMES[kind]}" in condition.message and "another application" not in condition.message


def test_the_operators_own_secrets_are_owned():
    store = SecretStore()
    run_passes(store, [])
    condition = _owned_condition(_decide(store))
    assert (condition.status, condition.reason) == (True, "Owned")


def _renewal(kind: CertKind) -> a.IssueCertificate:
    return a.IssueCertificate("renewing", ((kind.value, "renewing"),))


def _run(store: SecretStore, action: a.Step, seen):
    executor = ClusterExecutor(store, None, BODY, lambda *_: None, status=NEW, now=NOW)
    return asyncio.run(executor.run(action, TLS_SPEC, seen))


def test_a_secret_replaced_by_a_foreign_one_after_the_pass_looked_is_not_written():
    store = SecretStore()
    run_passes(store, [])
    seen = observe(store)  # the pass sees the operator's own client Secret
    name = NAMES[CertKind.CLIENT]
    del store.secrets[name]
    store.put(name, {"token": b"theirs"})  # deleted and created again by someone else
    before = copy.deepcopy(store.secrets[name])
    outcome = _run(store, _renewal(CertKind.CLIENT), seen)
    assert not outcome.done and f"Secret {name} exists and is not this cluster's" in outcome.message
    assert store.secrets[name] == before


def test_an_own_secret_changed_between_its_read_and_the_write_is_not_written_over():
    store = SecretStore()
    run_passes(store, [])
    seen = observe(store)
    name = NAMES[CertKind.CLIENT]
    read = SecretStore.get

    async def get_then_someone_writes(self, resource, namespace, secret):
        found = await read(self, resource, namespace, secret)
        if secret == name:  # the write the executor is about to make races another
            changed = copy.deepcopy(self.secrets[name])
            changed["data"]["extra"] = "YQ=="
            self._store(changed, changed["metadata"]["uid"])
        return found

    store.get = get_then_someone_writes.__get__(store)
    outcome = _run(store, _renewal(CertKind.CLIENT), seen)
    assert not outcome.done and "changed after this step read it" in outcome.message
    assert store.secrets[name]["data"]["extra"] == "YQ=="


def test_provided_secrets_are_the_users_own_and_need_no_label_or_owner():
    """spec.tls.issuer: Secrets: the operator only reads them (docs/operations/tls.md)."""
    store = SecretStore()
    run_passes(store, [])  # the Managed issuer's Secrets, as a stand-in for cert-manager's
    provided = {"member": "mine-member", "operator": "mine-operator"}
    for kind, name in provided.items():
        store.put(name, store.data(CertKind(kind)))  # no label, no owner
    body = {
        **OBSERVED_BODY,
        "spec": {
            "size": 3,
            "tls": {"issuer": "Secrets", "memberSecretName": "mine-member", "operatorSecretName": "mine-operator"},
        },
    }
    tls, credentials = asyncio.run(TLSSecrets().observe(store.observer, body))
    assert tls.foreign == {} and credentials is not None
    assert {kind.value for kind, view in tls.certs.items() if view and not view.problem} == set(provided)


def test_nothing_is_taken_from_a_foreign_secret():
    """A foreign Secret of the operator certificate's name is neither the operator's client
    identity nor a certificate of the cluster's (status.tls lists none)."""
    store = SecretStore()
    run_passes(store, [])
    name = NAMES[CertKind.OPERATOR]
    valid = store.data(CertKind.OPERATOR)
    del store.secrets[name]
    store.put(name, valid)  # the same bytes, someone else's Secret
    tls, credentials = asyncio.run(TLSSecrets().observe(store.observer, OBSERVED_BODY))
    assert credentials is None and tls.cert(CertKind.OPERATOR) is None
    assert set(tls.foreign) == {name}


def test_a_user_certificate_secret_is_deleted_only_when_it_is_the_operators():
    store = SecretStore()
    run_passes(store, [])
    seen = observe(store)
    ours, theirs = certs.user_secret_name("c", "gone"), certs.user_secret_name("c", "kept")
    store.put(ours, {"tls.crt": b"issued"}, **copy.deepcopy({**OURS, **OWNED}))  # label and owner: the operator's
    store.put(theirs, {"token": b"theirs"}, labels={naming.LABEL_AUTH_USER: "kept"})  # the label alone
    before = copy.deepcopy(store.secrets[theirs])
    assert _run(store, a.DeleteUserCertificate("removed", "gone"), seen).done
    refused = _run(store, a.DeleteUserCertificate("removed", "kept"), seen)
    assert ours not in store.secrets and store.secrets[theirs] == before
    assert not refused.done and f"Secret {theirs} exists and is not this cluster's" in refused.message
