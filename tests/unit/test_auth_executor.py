"""The executor's auth steps (controllers/cluster/execute_auth.py) against an in-memory etcd
auth client and Secrets API: a password reaches etcd and nothing else (no event, no status
field); a Secret that changed since the pass looked is not sent; authentication is enabled
only after the operator's user is read back with the root role, and proved afterwards; the
operator's own users are never removed; a change an interrupted attempt made counts as done;
a user's certificate is issued by the cluster's CA with CN = the user."""

from __future__ import annotations

import asyncio
import base64
import dataclasses

import pytest

from etcd_operator.clients.etcd.client import EtcdError
from etcd_operator.controllers.cluster.executor import ClusterExecutor
from etcd_operator.core.cluster import certs, pki
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.spec import SecretKeyRef
from tests.unit.cluster_scenarios import NOW, RECORDED
from tests.unit.test_cluster_auth import EMPTY, auth_spec, settled
from tests.unit.test_tls_issue import BODY, SecretStore

PASSWORD = "s3cr3t-Pa55word"


class FakeAuthClient:
    def __init__(self, users=None, fail_with: dict[str, str] | None = None):
        self.users: dict[str, set[str]] = users or {}
        self.passwords: dict[str, str | None] = {}
        self.calls: list[str] = []
        self.fail_with = fail_with or {}

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if name in self.fail_with:
            raise EtcdError("10.0.0.0:2379", name, None, self.fail_with[name])

    async def user_add(self, name, password):
        self._call("UserAdd")
        self.users.setdefault(name, set())
        self.passwords[name] = password

    async def user_change_password(self, name, password):
        self._call("UserChangePassword")
        self.passwords[name] = password

    async def user_roles(self, name):
        self._call("UserGet")
        return sorted(self.users.get(name, ()))

    async def user_delete(self, name):
        self._call("UserDelete")

    async def role_add(self, name):
        self._call("RoleAdd")

    async def auth_enable(self):
        self._call("AuthEnable")

    async def auth_status(self):
        self._call("AuthStatus")
        return True

    async def user_list(self):
        self._call("UserList")
        return sorted(self.users)


class Pool:
    def __init__(self, client):
        self.client = client

    def get(self, endpoint):
        return self.client


def run(step: a.Step, client: FakeAuthClient, store: SecretStore | None = None, seen=None):
    spec = auth_spec()
    events: list[str] = []
    executor = ClusterExecutor(
        store or SecretStore(),
        Pool(client),
        BODY,
        lambda kind, reason, message: events.append(f"{kind} {reason} {message}"),
        status=RECORDED,
        now=NOW,
    )
    outcome = asyncio.run(executor.run(step, spec, seen or settled(spec, EMPTY)))
    return outcome, events


def password_store(version="5") -> SecretStore:
    store = SecretStore()
    store.secrets["pw"] = {
        "metadata": {"name": "pw", "resourceVersion": version},
        "data": {"password": base64.b64encode(PASSWORD.encode()).decode()},
    }
    return store


def test_a_password_reaches_etcd_and_only_its_secrets_version_is_recorded():
    client = FakeAuthClient()
    step = a.AddAuthUser("adding user app", "app", SecretKeyRef("pw"), "5")
    outcome, events = run(step, client, password_store())
    assert outcome.done and client.passwords == {"app": PASSWORD}
    assert outcome.status_fields == {"auth": {"passwordVersions": {"app": "5"}}}
    assert events and not any(PASSWORD in e for e in events)


def test_a_removed_password_is_replaced_by_a_random_one_that_nothing_records():
    client = FakeAuthClient({"app": {"tenant-a"}})
    client.passwords["app"] = PASSWORD
    outcome, events = run(a.ClearUserPassword("passwordSecretRef removed", "app"), client)
    first = client.passwords["app"]
    assert outcome.done and client.calls == ["UserChangePassword"]
    assert first != PASSWORD and len(first) >= 32, "the old password must stop working"
    assert outcome.status_fields == {"auth": {"passwordVersions": {"app": None}}}
    assert events and not any(first in e for e in events)
    run(a.ClearUserPassword("interrupted, again", "app"), client)
    assert client.passwords["app"] not in (first, PASSWORD), "random each time: nothing to guess or recover"
    with pytest.raises(ValueError, match="operator's own user"):
        run(a.ClearUserPassword("never", "etcd-operator"), FakeAuthClient())


def test_a_password_secret_changed_since_the_pass_looked_is_not_sent():
    client = FakeAuthClient({"app": set()})
    step = a.ChangeUserPassword("setting", "app", SecretKeyRef("pw"), "5")
    outcome, _ = run(step, client, password_store(version="6"))
    assert not outcome.done and client.calls == [] and not outcome.status_fields


def test_a_user_added_by_an_interrupted_attempt_gets_its_password_set():
    client = FakeAuthClient(fail_with={"UserAdd": "etcdserver: user name already exists"})
    outcome, _ = run(a.AddAuthUser("again", "app", SecretKeyRef("pw"), "5"), client, password_store())
    assert outcome.done and client.calls == ["UserAdd", "UserChangePassword"] and client.passwords["app"] == PASSWORD


def test_a_role_added_by_an_interrupted_attempt_counts_as_done():
    client = FakeAuthClient(fail_with={"RoleAdd": "etcdserver: role name already exists"})
    assert run(a.AddAuthRole("again", "tenant-a"), client)[0].done


def test_auth_is_enabled_only_after_the_operators_user_is_read_back_with_the_root_role():
    without_root = FakeAuthClient({"root": {"root"}, "etcd-operator": set()})
    outcome, _ = run(a.EnableAuth("enable", "etcd-operator"), without_root)
    assert not outcome.done and without_root.calls == ["UserGet"]
    ready = FakeAuthClient({"root": {"root"}, "etcd-operator": {"root"}})
    outcome, events = run(a.EnableAuth("enable", "etcd-operator"), ready)
    assert outcome.done and ready.calls == ["UserGet", "AuthEnable", "AuthStatus", "UserList"]
    assert any("AuthEnabled" in e for e in events)


def test_a_failed_admin_call_after_enabling_is_told_to_people():
    client = FakeAuthClient({"etcd-operator": {"root"}}, fail_with={"UserList": "etcdserver: permission denied"})
    events: list[str] = []
    with pytest.raises(EtcdError):
        spec = auth_spec()
        executor = ClusterExecutor(
            SecretStore(), Pool(client), BODY, lambda *e: events.append(" ".join(e)), status=RECORDED, now=NOW
        )
        asyncio.run(executor.run(a.EnableAuth("enable", "etcd-operator"), spec, settled(spec, EMPTY)))
    assert any("AuthIdentityFailed" in e for e in events)


@pytest.mark.parametrize("user", ["root", "etcd-operator"])
def test_the_operators_own_users_are_never_removed(user):
    client = FakeAuthClient({user: {"root"}})
    with pytest.raises(ValueError):
        run(a.DeleteAuthUser("remove", user), client)
    assert client.calls == []


def test_a_users_certificate_is_signed_by_the_cluster_ca_with_the_users_name():
    spec = auth_spec()
    store = SecretStore()
    ca = pki.new_ca(certs.request_for(spec, "c", "ns", certs.CertKind.CA), NOW)
    store.secrets[certs.secret_name(spec, "c", certs.CertKind.CA)] = {
        "metadata": {"name": "c-ca"},
        "data": {k: base64.b64encode(v).decode() for k, v in ca.items()},
    }
    seen = dataclasses.replace(settled(spec, EMPTY), auth=dataclasses.replace(EMPTY, user_certs={}))
    outcome, events = run(a.IssueUserCertificate("issuing", "tenant-a", NOW + 3600.5), FakeAuthClient(), store, seen)
    assert outcome.done
    secret = store.secrets["c-user-tenant-a"]
    assert secret["metadata"]["labels"]["etcd.operator.dev/auth-user"] == "tenant-a"
    assert secret["metadata"]["ownerReferences"][0]["kind"] == "EtcdCluster"
    view = pki.describe({k: base64.b64decode(v) for k, v in secret["data"].items()})
    assert view.common_name == "tenant-a" and view.problem is None
    assert view.not_after == NOW + 3600, "valid until the time recorded before the step, never later"
    assert view.issuer_fingerprint == pki.describe(ca).fingerprint
    assert not any("BEGIN" in e for e in events)
