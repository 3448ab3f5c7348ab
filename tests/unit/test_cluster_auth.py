"""spec.auth (cluster/auth.py): the one next step towards etcd's users, roles and auth switch
as declared, the order that never locks the operator out, what is managed and what is only
reported, the users' certificates, and the conditions. Steps are applied to a small model of
etcd's auth store, so that a sequence of passes can be followed to its end."""

from __future__ import annotations

import dataclasses
import pathlib

import yaml

from etcd_operator.core.cluster import auth, builders, tls_plan
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.certs import CertKind
from etcd_operator.core.cluster.decision import plan
from etcd_operator.core.cluster.observed import AuthView, EtcdPermission, Observed
from etcd_operator.core.cluster.recorded import AuthRecord, ClusterStatus
from etcd_operator.core.cluster.spec import ClusterSpec
from tests.unit.cluster_scenarios import NOW, RECORDED
from tests.unit.test_tls_plan import CA_FP, cert, good_certs, running

ROOT_DIR = pathlib.Path(__file__).resolve().parents[2]


def auth_spec(enabled: bool | None = True, tls=None, **auth_fields) -> ClusterSpec:
    declared = {
        **({} if enabled is None else {"enabled": enabled}),
        "roles": [
            {"name": "tenant-a", "permissions": [{"key": "/tenant-a/", "prefix": True, "access": "ReadWrite"}]},
            {"name": "tenant-b", "permissions": [{"key": "/tenant-b/", "prefix": True, "access": "ReadWrite"}]},
        ],
        "users": [
            {"name": "tenant-a", "roles": ["tenant-a"], "certificate": True},
            {"name": "tenant-b", "roles": ["tenant-b"], "certificate": True},
        ],
    }
    declared.update(auth_fields)
    return ClusterSpec.from_dict({"size": 3, "tls": tls if tls is not None else {}, "auth": declared})


def user_certs(*users: str) -> dict:
    return {u: cert(fingerprint=f"user-{u}", common_name=u) for u in users}


def settled(spec: ClusterSpec, view: AuthView, certs=None) -> Observed:
    """Three healthy members running `spec`'s pods, with TLS, and etcd's auth as `view`."""
    tls_certs = good_certs(**{CertKind.OPERATOR: cert(common_name="etcd-operator"), **(certs or {})})
    seen = running(tls_plan.HTTPS, tls_certs)
    current = builders.pod_spec_hash(plan(spec, RECORDED, seen, NOW).acting_spec)
    return dataclasses.replace(
        seen, pods={n: dataclasses.replace(p, spec_hash=current) for n, p in seen.pods.items()}, auth=view
    )


EMPTY = AuthView(read=True, user_certs=user_certs("tenant-a", "tenant-b"))


def apply(view: AuthView, step: a.Step) -> AuthView:
    """What etcd's auth store (and the certificate Secrets) hold after `step`."""
    users = {u: set(r) for u, r in view.users.items()}
    roles = {r: {(p.key, p.range_end): p.perm_type for p in ps} for r, ps in view.roles.items()}
    certs = dict(view.user_certs)
    enabled = view.enabled
    match step:
        case a.AddAuthUser():
            users.setdefault(step.user, set())
        case a.GrantUserRole():
            users[step.user].add(step.role)
        case a.RevokeUserRole():
            users[step.user].discard(step.role)
        case a.DeleteAuthUser():
            users.pop(step.user)
        case a.AddAuthRole():
            roles.setdefault(step.role, {})
        case a.GrantRolePermission():
            roles[step.role][(step.permission.key, step.permission.range_end)] = step.permission.perm_type
        case a.RevokeRolePermission():
            roles[step.role].pop((step.permission.key, step.permission.range_end))
        case a.DeleteAuthRole():
            roles.pop(step.role)
        case a.EnableAuth():
            assert "root" in users["root"] and "root" in users[step.operator_user], "etcd refuses, or locks out"
            enabled = True
        case a.DisableAuth():
            enabled = False
        case a.IssueUserCertificate():
            lifetime = step.valid_until - NOW
            certs[step.user] = cert(fingerprint=f"user-{step.user}", common_name=step.user, lifetime=lifetime)
        case a.RecordUserCertificateBound():
            pass
        case a.DeleteUserCertificate():
            certs.pop(step.user)
        case a.ChangeUserPassword() | a.ClearUserPassword():
            pass
        case _:
            raise AssertionError(f"not an auth step: {step}")
    return dataclasses.replace(
        view,
        enabled=enabled,
        users={u: tuple(sorted(r)) for u, r in users.items()},
        roles={r: tuple(EtcdPermission(k, e, t) for (k, e), t in sorted(ps.items())) for r, ps in roles.items()},
        user_certs=certs,
    )


def executor_patch(step: a.Step) -> dict:
    """status.auth as execute_auth reports it: the password Secret version a step set."""
    if isinstance(step, a.AddAuthUser | a.ChangeUserPassword) and step.password and step.password_version:
        return {"passwordVersions": {step.user: step.password_version}}
    if isinstance(step, a.ClearUserPassword):
        return {"passwordVersions": {step.user: None}}
    return {}


def merged(stored: dict, patch: dict) -> dict:
    """`stored` after a JSON merge patch (what the API server does with a status write)."""
    result = dict(stored)
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merged(result[key], value)
        else:
            result[key] = value
    return result


def write(status: ClusterStatus, decision, patch: dict | None = None) -> ClusterStatus:
    """status after this pass's write of status.auth, merged as the API server merges it."""
    written = auth.status_record(decision.auth_record or AuthRecord(), patch, status.auth)
    return dataclasses.replace(status, auth=AuthRecord.from_dict(merged(status.auth.to_dict(), written)))


def converge(spec: ClusterSpec, view: AuthView, status: ClusterStatus = RECORDED, limit: int = 40, now: float = NOW):
    """Plan, apply and record pass after pass until the planner has nothing left to do."""
    taken = []
    for _ in range(limit):
        decision = plan(spec, status, settled(spec, view), now)
        status = write(status, decision, executor_patch(decision.action))
        if not isinstance(decision.action, auth.STEPS):
            return taken, view, status, decision
        taken.append(decision.action)
        view = apply(view, decision.action)
    raise AssertionError(f"no end after {limit} steps: {taken[-5:]}")


def test_from_nothing_the_identity_then_roles_then_users_then_enable_one_change_per_step():
    taken, view, status, decision = converge(auth_spec(), EMPTY)
    kinds = [s.kind for s in taken]
    assert kinds == [
        "AddAuthUser",  # root
        "GrantUserRole",
        "AddAuthUser",  # etcd-operator
        "GrantUserRole",
        "AddAuthRole",
        "GrantRolePermission",
        "AddAuthRole",
        "GrantRolePermission",
        "AddAuthUser",
        "GrantUserRole",
        "AddAuthUser",
        "GrantUserRole",
        "EnableAuth",
    ]
    assert [s.user for s in taken[:4] if isinstance(s, (a.AddAuthUser, a.GrantUserRole))] == [
        "root",
        "root",
        "etcd-operator",
        "etcd-operator",
    ]
    assert taken[5].permission == EtcdPermission(b"/tenant-a/", b"/tenant-a0", "READWRITE")
    assert view.enabled and view.users["tenant-a"] == ("tenant-a",)
    assert status.auth.managed_users == ("tenant-a", "tenant-b")  # never root nor the operator
    assert status.auth.managed_roles == ("tenant-a", "tenant-b")
    assert isinstance(decision.action, a.Steady)
    by_type = {c.type: c for c in decision.conditions}
    assert (by_type["AuthEnabled"].status, by_type["AuthEnabled"].reason) == (True, "IdentityVerified")
    assert (by_type["AuthInSync"].status, by_type["AuthInSync"].reason) == (True, "InSync")


def test_a_pass_killed_after_any_step_resumes_from_what_etcd_holds():
    """The status record of an interrupted pass is lost: the next one starts from etcd alone."""
    taken, _, _, _ = converge(auth_spec(), EMPTY)
    view = EMPTY
    for step in taken:
        view = apply(view, step)
        rest, final, _, _ = converge(auth_spec(), view)
        assert final.enabled and not any(isinstance(s, a.DeleteAuthUser | a.DeleteAuthRole) for s in rest)


def without_operator_cn(o: Observed) -> Observed:
    return dataclasses.replace(o, tls=dataclasses.replace(o.tls, certs={**o.tls.certs, CertKind.OPERATOR: cert()}))


def test_without_a_known_operator_identity_auth_is_never_enabled():
    spec = auth_spec()
    view = EMPTY
    for _ in range(30):
        step = plan(spec, RECORDED, without_operator_cn(settled(spec, view)), NOW).action
        assert not isinstance(step, a.EnableAuth)
        if not isinstance(step, auth.STEPS):
            assert isinstance(step, a.Wait) and "client certificate" in step.reason
            return
        view = apply(view, step)
    raise AssertionError("did not settle")


def test_auth_is_never_enabled_while_the_operators_user_lacks_the_root_role():
    view = dataclasses.replace(
        EMPTY,
        users={"root": ("root",), "etcd-operator": (), "tenant-a": ("tenant-a",), "tenant-b": ("tenant-b",)},
    )
    spec = auth_spec()
    blocked = auth.enable_blocker(spec, RECORDED, settled(spec, view), NOW)
    assert blocked == "etcd user etcd-operator does not hold the root role yet"
    step = plan(spec, RECORDED, settled(spec, view), NOW).action
    assert isinstance(step, a.GrantUserRole) and (step.user, step.role) == ("etcd-operator", "root")


def test_a_user_whose_password_secret_is_missing_holds_enabling_and_is_reported():
    spec = auth_spec(users=[{"name": "app", "roles": ["tenant-a"], "passwordSecretRef": {"name": "app-password"}}])
    view = dataclasses.replace(EMPTY, user_certs={}, password_versions={"app": None})
    taken, final, _, decision = converge(spec, view)
    assert not final.enabled and "app" not in final.users
    assert "app" in decision.action.reason
    in_sync = next(c for c in decision.conditions if c.type == "AuthInSync")
    assert (in_sync.status, in_sync.reason) == (False, "PasswordSecretMissing")
    assert "app-password" in in_sync.message


def test_a_password_is_set_again_when_its_secret_changes_and_only_its_resource_version_is_recorded():
    spec = auth_spec(users=[{"name": "app", "roles": ["tenant-a"], "passwordSecretRef": {"name": "pw"}}])
    view = dataclasses.replace(EMPTY, user_certs={}, password_versions={"app": "7"})
    taken, view, status, _ = converge(spec, view)
    add = next(s for s in taken if isinstance(s, a.AddAuthUser) and s.user == "app")
    assert add.password is not None and (add.password.name, add.password.key, add.password_version) == (
        "pw",
        "password",
        "7",
    )
    assert not any(isinstance(s, a.ChangeUserPassword) for s in taken)  # set once, when added
    assert status.auth.password_versions == {"app": "7"}
    changed = dataclasses.replace(view, password_versions={"app": "8"})
    step = plan(spec, status, settled(spec, changed), NOW).action
    assert isinstance(step, a.ChangeUserPassword) and (step.user, step.password_version) == ("app", "8")


def enabled_view() -> AuthView:
    base, _, _, _ = converge(auth_spec(), EMPTY)
    view = EMPTY
    for step in base:
        view = apply(view, step)
    return view


def test_foreign_users_and_roles_are_reported_never_removed():
    view = enabled_view()
    view = dataclasses.replace(
        view,
        users={**view.users, "someone": ("legacy",)},
        roles={**view.roles, "legacy": (EtcdPermission(b"/x", b"", "READ"),)},
    )
    status = dataclasses.replace(RECORDED, auth=AuthRecord(("tenant-a", "tenant-b"), ("tenant-a", "tenant-b")))
    taken, final, _, decision = converge(auth_spec(), view, status)
    assert taken == [] and "someone" in final.users and "legacy" in final.roles
    in_sync = next(c for c in decision.conditions if c.type == "AuthInSync")
    assert (in_sync.status, in_sync.reason) == (False, "UnmanagedEntries")
    assert "user someone" in in_sync.message and "role legacy" in in_sync.message
    assert "UnmanagedEntries" in auth.WARNING_REASONS


def test_managed_entries_no_longer_declared_are_removed_users_first_then_their_certificates_and_roles():
    view = enabled_view()
    status = dataclasses.replace(RECORDED, auth=AuthRecord(("tenant-a", "tenant-b"), ("tenant-a", "tenant-b")))
    spec = auth_spec(
        roles=[{"name": "tenant-a", "permissions": [{"key": "/tenant-a/", "prefix": True, "access": "ReadWrite"}]}],
        users=[{"name": "tenant-a", "roles": ["tenant-a"], "certificate": True}],
    )
    taken, final, status, _ = converge(spec, view, status)
    assert [(s.kind, getattr(s, "user", getattr(s, "role", ""))) for s in taken] == [
        ("DeleteAuthUser", "tenant-b"),  # revocation first: its certificate is refused from now on
        ("DeleteUserCertificate", "tenant-b"),
        ("DeleteAuthRole", "tenant-b"),
    ]
    assert final.enabled and set(final.users) == {"root", "etcd-operator", "tenant-a"}
    assert status.auth.managed_users == ("tenant-a",) and status.auth.managed_roles == ("tenant-a",)


def test_the_operators_own_users_are_never_removed_even_if_recorded_as_managed():
    view = enabled_view()
    status = dataclasses.replace(
        RECORDED, auth=AuthRecord(("root", "etcd-operator", "tenant-a", "tenant-b"), ("root",))
    )
    taken, final, _, _ = converge(auth_spec(), view, status)
    assert taken == [] and {"root", "etcd-operator"} <= set(final.users)


def test_permission_drift_of_a_managed_role_is_corrected_and_flagged_as_drift():
    view = enabled_view()
    drifted = dataclasses.replace(
        view,
        roles={
            **view.roles,
            "tenant-a": (EtcdPermission(b"/tenant-a/", b"/tenant-a0", "READ"), EtcdPermission(b"/", b"\0", "READ")),
        },
    )
    status = dataclasses.replace(RECORDED, auth=AuthRecord(("tenant-a", "tenant-b"), ("tenant-a", "tenant-b")))
    taken, final, _, _ = converge(auth_spec(), drifted, status)
    assert [(s.kind, s.drift) for s in taken] == [("GrantRolePermission", True), ("RevokeRolePermission", True)]
    assert final.roles["tenant-a"] == (EtcdPermission(b"/tenant-a/", b"/tenant-a0", "READWRITE"),)


def test_a_users_roles_follow_the_declaration():
    view = enabled_view()
    view = dataclasses.replace(view, users={**view.users, "tenant-a": ("tenant-a", "tenant-b")})
    taken, final, _, _ = converge(auth_spec(), view)
    assert [s.kind for s in taken] == ["RevokeUserRole"] and final.users["tenant-a"] == ("tenant-a",)


def test_auth_is_turned_off_only_by_enabled_false_and_a_condition_says_so():
    view = enabled_view()
    taken, final, _, decision = converge(auth_spec(enabled=False), view)
    assert [s.kind for s in taken] == ["DisableAuth"] and not final.enabled
    cond = next(c for c in decision.conditions if c.type == "AuthEnabled")
    assert (cond.status, cond.reason) == (False, "AuthDisabled")
    # Without a spec.auth block (the schema refuses removing it while enabled) nothing is touched.
    bare = ClusterSpec.from_dict({"size": 3, "tls": {}})
    step = plan(bare, RECORDED, settled(bare, dataclasses.replace(view, user_certs={})), NOW).action
    assert not isinstance(step, auth.STEPS)


def test_an_unset_enabled_leaves_the_switch_as_found_and_keeps_users_and_roles():
    on, off = enabled_view(), EMPTY
    unset = auth_spec(enabled=None)
    taken, final, _, decision = converge(unset, on)
    assert taken == [] and final.enabled, "auth switched off without spec.auth.enabled: false"
    cond = next(c for c in decision.conditions if c.type == "AuthEnabled")
    assert (cond.status, cond.reason) == (True, "LeftAsFound")
    taken, final, _, decision = converge(unset, off)
    assert "EnableAuth" not in [s.kind for s in taken] and not final.enabled
    assert {"AddAuthRole", "AddAuthUser"} <= {s.kind for s in taken}, "declared users and roles are still kept"
    cond = next(c for c in decision.conditions if c.type == "AuthEnabled")
    assert (cond.status, cond.reason) == (False, "LeftAsFound")


def test_nothing_is_changed_while_etcds_users_cannot_be_read():
    spec = auth_spec()
    seen = settled(spec, AuthView(read=False, problem="UserList: permission denied", user_certs=EMPTY.user_certs))
    decision = plan(spec, RECORDED, seen, NOW)
    assert isinstance(decision.action, a.Wait) and "permission denied" in decision.action.reason
    cond = next(c for c in decision.conditions if c.type == "AuthEnabled")
    assert cond.status is None


def test_auth_waits_for_a_settled_cluster():
    spec = auth_spec()
    seen = settled(spec, EMPTY)
    outdated = dataclasses.replace(
        seen, pods={**seen.pods, "c-2": dataclasses.replace(seen.pods["c-2"], spec_hash="old")}
    )
    step = plan(spec, RECORDED, outdated, NOW).action
    assert not isinstance(step, auth.STEPS)


def test_user_certificates_are_issued_renewed_and_reissued_from_the_cas_trust():
    spec = auth_spec()
    lifetime = spec.auth.certificate_lifetime
    bound = dataclasses.replace(RECORDED, auth=AuthRecord(certificates_valid_until={"tenant-a": NOW + lifetime}))
    none = dataclasses.replace(EMPTY, user_certs={})
    step = plan(spec, bound, settled(spec, none), NOW).action
    assert isinstance(step, a.IssueUserCertificate) and step.user == "tenant-a" and "c-user-tenant-a" in step.reason
    assert step.valid_until == NOW + lifetime
    old = {"tenant-a": cert(fingerprint="x", common_name="tenant-a", age=900.0), **user_certs("tenant-b")}
    step = plan(spec, bound, settled(spec, dataclasses.replace(EMPTY, user_certs=old)), NOW).action
    assert isinstance(step, a.IssueUserCertificate) and "renewing" in step.reason
    wrong_cn = {"tenant-a": cert(common_name="someone-else"), **user_certs("tenant-b")}
    step = plan(spec, bound, settled(spec, dataclasses.replace(EMPTY, user_certs=wrong_cn)), NOW).action
    assert isinstance(step, a.IssueUserCertificate) and "CN tenant-a" in step.reason
    other_ca = {"tenant-a": cert(common_name="tenant-a", issuer="other"), **user_certs("tenant-b")}
    step = plan(spec, bound, settled(spec, dataclasses.replace(EMPTY, user_certs=other_ca)), NOW).action
    assert isinstance(step, a.IssueUserCertificate) and CA_FP not in step.reason and "another" in step.reason
    too_long = {"tenant-a": cert(common_name="tenant-a", lifetime=90 * 86400.0), **user_certs("tenant-b")}
    step = plan(spec, bound, settled(spec, dataclasses.replace(EMPTY, user_certs=too_long)), NOW).action
    assert isinstance(step, a.IssueUserCertificate) and "longer than spec.auth.certificateLifetime" in step.reason


def test_a_user_certificates_validity_is_recorded_before_it_is_issued_and_bounds_it():
    spec = auth_spec(certificateLifetime="2h")
    taken, view, status, _ = converge(spec, dataclasses.replace(EMPTY, user_certs={}))
    issuing = [s for s in taken if isinstance(s, a.RecordUserCertificateBound | a.IssueUserCertificate)]
    assert [(s.kind, s.user, s.valid_until) for s in issuing] == [
        ("RecordUserCertificateBound", "tenant-a", NOW + 7200),
        ("IssueUserCertificate", "tenant-a", NOW + 7200),
        ("RecordUserCertificateBound", "tenant-b", NOW + 7200),
        ("IssueUserCertificate", "tenant-b", NOW + 7200),
    ]
    assert view.user_certs["tenant-a"].not_after == NOW + 7200
    assert status.auth.certificates_valid_until == {"tenant-a": NOW + 7200, "tenant-b": NOW + 7200}
    # A bound recorded long ago is recorded anew: a certificate never gets less than most of its lifetime.
    stale = dataclasses.replace(status, auth=dataclasses.replace(status.auth, certificates_valid_until={}))
    later = dataclasses.replace(view, user_certs={})
    step = plan(spec, stale, settled(spec, later), NOW + 100).action
    assert isinstance(step, a.RecordUserCertificateBound) and step.valid_until == NOW + 100 + 7200


def test_a_removed_password_is_replaced_by_a_random_one_first_and_auth_is_not_in_sync_until_then():
    tenants = [
        {"name": "tenant-a", "roles": ["tenant-a"], "certificate": True},
        {"name": "tenant-b", "roles": ["tenant-b"], "certificate": True},
    ]
    with_password = [*tenants, {"name": "app", "roles": ["tenant-a"], "passwordSecretRef": {"name": "pw"}}]
    without = [*tenants, {"name": "app", "roles": ["tenant-a"]}]
    view = dataclasses.replace(
        enabled_view(), users={**enabled_view().users, "app": ("tenant-a",)}, password_versions={"app": "5"}
    )
    status = dataclasses.replace(
        RECORDED, auth=AuthRecord(("app", "tenant-a", "tenant-b"), ("tenant-a", "tenant-b"), {"app": "5"})
    )
    assert converge(auth_spec(users=with_password), view, status)[0] == []
    # passwordSecretRef removed, and a role changed at the same time: the password goes first.
    roles = [
        {"name": "tenant-a", "permissions": [{"key": "/a/", "prefix": True, "access": "Read"}]},
        {"name": "tenant-b", "permissions": [{"key": "/tenant-b/", "prefix": True, "access": "ReadWrite"}]},
    ]
    spec = auth_spec(users=without, roles=roles)
    decision = plan(spec, status, settled(spec, dataclasses.replace(view, password_versions={})), NOW)
    assert isinstance(decision.action, a.ClearUserPassword) and decision.action.user == "app"
    in_sync = next(c for c in decision.conditions if c.type == "AuthInSync")
    assert (in_sync.status, in_sync.reason) == (False, "Reconciling") and "passwordSecretRef" in in_sync.message
    taken, _, status, decision = converge(spec, dataclasses.replace(view, password_versions={}), status)
    assert [s.kind for s in taken].count("ClearUserPassword") == 1
    assert status.auth.password_versions == {}, "the record of the cleared password is gone from status"
    in_sync = next(c for c in decision.conditions if c.type == "AuthInSync")
    assert (in_sync.status, in_sync.reason) == (True, "InSync")


def test_a_removed_user_is_deleted_from_etcd_at_once_and_its_name_retired_until_its_certificates_expire():
    view = enabled_view()
    # The Secret holds a certificate valid until NOW + 100; one issued before is valid until NOW + 200.
    view = dataclasses.replace(
        view, user_certs={**view.user_certs, "tenant-b": cert(common_name="tenant-b", lifetime=100.0)}
    )
    status = dataclasses.replace(
        RECORDED,
        auth=AuthRecord(
            ("tenant-a", "tenant-b"), ("tenant-a", "tenant-b"), certificates_valid_until={"tenant-b": NOW + 200}
        ),
    )
    only_a = [{"name": "tenant-a", "roles": ["tenant-a"], "certificate": True}]
    spec = auth_spec(users=only_a)
    taken, view, status, _ = converge(spec, view, status)
    assert taken[0] == a.DeleteAuthUser(taken[0].reason, "tenant-b")
    assert status.auth.retired_users == {"tenant-b": NOW + 200}
    assert "tenant-b" not in status.auth.certificates_valid_until
    written = status.auth.to_dict()["retiredUsers"]
    assert written == [{"name": "tenant-b", "certificateValidUntil": "1970-01-12T13:50:00Z"}]
    # Declared again: not created, no certificate issued, and AuthInSync says until when.
    again = auth_spec()
    taken, view, status, decision = converge(again, view, status)
    assert not any(getattr(s, "user", "") == "tenant-b" for s in taken)
    assert "tenant-b" not in view.users and "tenant-b" not in view.user_certs
    in_sync = next(c for c in decision.conditions if c.type == "AuthInSync")
    assert (in_sync.status, in_sync.reason) == (False, "NameRetired")
    assert "tenant-b (until 1970-01-12T13:55:00Z" in in_sync.message
    assert "NameRetired" in auth.WARNING_REASONS
    # The clock-skew margin past the certificate's end, the name is free again.
    just_before = NOW + 200 + auth.CLOCK_SKEW_MARGIN
    assert converge(again, view, status, now=just_before)[0] == []
    taken, view, status, decision = converge(again, view, status, now=just_before + 1)
    assert {s.kind for s in taken if getattr(s, "user", "") == "tenant-b"} == {
        "RecordUserCertificateBound",
        "IssueUserCertificate",
        "AddAuthUser",
        "GrantUserRole",
    }
    assert status.auth.retired_users == {}


def test_revocation_does_not_wait_for_a_roll_to_settle():
    view = enabled_view()
    status = dataclasses.replace(RECORDED, auth=AuthRecord(("tenant-a", "tenant-b"), ("tenant-a", "tenant-b")))
    spec = auth_spec(users=[{"name": "tenant-a", "roles": ["tenant-a"], "certificate": True}])
    seen = settled(spec, view)
    outdated = dataclasses.replace(
        seen, pods={**seen.pods, "c-2": dataclasses.replace(seen.pods["c-2"], spec_hash="old")}
    )
    step = plan(spec, status, outdated, NOW).action
    assert isinstance(step, a.DeleteAuthUser) and step.user == "tenant-b"
    # Any other auth change waits for the roll.
    step = plan(auth_spec(), status, outdated, NOW).action
    assert not isinstance(step, auth.STEPS)


def test_a_name_declared_again_while_its_user_is_still_in_etcd_is_deleted_first():
    view = enabled_view()
    status = dataclasses.replace(
        RECORDED,
        auth=AuthRecord(("tenant-a", "tenant-b"), ("tenant-a", "tenant-b"), retired_users={"tenant-b": NOW + 600}),
    )
    step = plan(auth_spec(), status, settled(auth_spec(), view), NOW).action
    assert isinstance(step, a.DeleteAuthUser) and step.user == "tenant-b" and "retired" in step.reason


def test_with_issuer_secrets_no_user_certificate_is_issued():
    spec = auth_spec(tls={"issuer": "Secrets", "memberSecretName": "m", "operatorSecretName": "o"})
    seen = settled(spec, dataclasses.replace(EMPTY, user_certs={}))
    assert not isinstance(plan(spec, RECORDED, seen, NOW).action, a.IssueUserCertificate | a.DeleteUserCertificate)


def test_a_prefix_covers_every_key_that_starts_with_it():
    assert auth.prefix_end(b"/tenant-a/") == b"/tenant-a0"
    assert auth.prefix_end(b"a\xff") == b"b"
    assert auth.prefix_end(b"\xff\xff") == b"\0"
    role = auth_spec(
        roles=[
            {
                "name": "r",
                "permissions": [
                    {"key": "/k", "access": "Read"},
                    {"key": "/k", "access": "Write"},
                    {"key": "/p/", "prefix": True, "access": "Read"},
                ],
            }
        ],
        users=[],
    ).auth.roles[0]
    assert auth.etcd_permissions(role) == {(b"/k", b""): "READWRITE", (b"/p/", b"/p0"): "READ"}


def cluster_schema() -> dict:
    crd = yaml.safe_load((ROOT_DIR / "crds" / "etcdclusters.yaml").read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def test_the_schema_keys_users_and_roles_by_name_and_refuses_what_would_lock_out_or_dangle():
    spec_schema = cluster_schema()
    auth_schema = spec_schema["properties"]["auth"]
    for field in ("users", "roles"):
        node = auth_schema["properties"][field]
        assert node["x-kubernetes-list-type"] == "map" and node["x-kubernetes-list-map-keys"] == ["name"]
        assert node["maxItems"] <= 64
    messages = " ".join(r["message"] for r in spec_schema["x-kubernetes-validations"])
    assert "set spec.auth.enabled to false to turn authentication off" in messages
    assert "spec.auth.enabled needs spec.tls.enabled" in messages
    user_rules = auth_schema["properties"]["users"]["items"]["x-kubernetes-validations"]
    assert "'root'" in user_rules[0]["rule"] and "'etcd-operator'" in user_rules[0]["rule"]
    role_rules = auth_schema["properties"]["roles"]["items"]["x-kubernetes-validations"]
    assert "'root'" in role_rules[0]["rule"]
    assert "declared in spec.auth.roles" in auth_schema["x-kubernetes-validations"][0]["message"]


def test_every_auth_step_has_an_executor_and_a_progress_reason():
    from etcd_operator.controllers.cluster.executor import HANDLERS
    from etcd_operator.core.cluster.status import PROGRESS_REASONS

    for step in auth.STEPS:
        assert step in HANDLERS and step.__name__ in PROGRESS_REASONS, step.__name__


def test_a_declared_user_named_as_the_operators_certificate_is_never_changed():
    """With issuer Secrets the operator's CN is whatever its certificate says; the schema only knows etcd-operator."""
    spec = auth_spec(
        tls={"issuer": "Secrets", "memberSecretName": "m", "operatorSecretName": "o"},
        users=[{"name": "platform-operator", "roles": ["tenant-a"]}],
    )
    view = dataclasses.replace(EMPTY, user_certs={})
    taken = []
    for _ in range(20):
        seen = settled(spec, view, certs={CertKind.OPERATOR: cert(common_name="platform-operator")})
        step = plan(spec, RECORDED, seen, NOW).action
        if not isinstance(step, auth.STEPS):
            break
        taken.append(step)
        view = apply(view, step)
    assert view.enabled and view.users["platform-operator"] == ("root",)
    assert not any(getattr(s, "user", "") == "platform-operator" and s.kind == "RevokeUserRole" for s in taken)


def test_after_a_restore_every_declared_password_is_set_again_from_its_secret_or_cleared():
    """A restore brings back the passwords etcd held at its snapshot: a password rotated (or
    removed) after it would work again, and the Secret's would not, while status still
    records the Secret's version as set (issue 41, item 12c)."""
    users = [
        {"name": "tenant-a", "roles": ["tenant-a"], "certificate": True},
        {"name": "tenant-b", "roles": ["tenant-b"], "certificate": True},
        {"name": "app", "roles": ["tenant-a"], "passwordSecretRef": {"name": "pw"}},
    ]
    spec = auth_spec(users=users)
    view = dataclasses.replace(EMPTY, password_versions={"app": "8"})
    taken, view, status, _ = converge(spec, view)
    assert status.auth.password_versions == {"app": "8"}  # the rotated password, set before the restore
    restoring = dataclasses.replace(settled(spec, dataclasses.replace(view, read=False)), restoring="r1")
    status = write(status, plan(spec, status, restoring, NOW))
    assert status.auth.password_versions == {u["name"]: auth.RESTORED_PASSWORD for u in users}
    # The restored cluster runs: its users as the snapshot had them, the passwords unknown.
    taken, _, status, _ = converge(spec, view, status)
    changed = [(s.user, s.password_version) for s in taken if isinstance(s, a.ChangeUserPassword)]
    cleared = sorted(s.user for s in taken if isinstance(s, a.ClearUserPassword))
    assert changed == [("app", "8")] and cleared == ["tenant-a", "tenant-b"]
    assert status.auth.password_versions == {"app": "8"}
