"""When a backup is verified, what the verdict is, and what status says about it. Pure."""

from __future__ import annotations

import dataclasses
import datetime

import pytest

from etcd_operator.core.backup import steps as s
from etcd_operator.core.backup.manifest import Manifest
from etcd_operator.core.backup.planner import plan
from etcd_operator.core.backup.scratch_pod import CHECK_CONTAINER, CLIENT_SOCKET, SCRATCH, verification_pod
from etcd_operator.core.backup.scratch_verdict import (
    CHECK_EXIT_CODES,
    Expected,
    check_exit_code,
    check_verdict,
    compare,
    init_failure_verdict,
)
from etcd_operator.core.backup.state import (
    CheckResult,
    InitFailure,
    Observed,
    RunState,
    ScheduleSpec,
    ScratchPod,
    VerificationPolicy,
)
from etcd_operator.core.backup.status import VERIFICATION_FAILED, build_status
from etcd_operator.programs.scratch_check import expected_from

UTC = datetime.UTC
T0 = datetime.datetime(2026, 11, 21, 12, 0, 1, tzinfo=UTC)
CREATED = Observed(T0, generation=1)
NOW = "2026-11-21T12:00:05Z"
EVERY_MINUTE = "* * * * *"


def at(minutes: float) -> datetime.datetime:
    return T0 + datetime.timedelta(minutes=minutes)


def test_scheduled_backups_are_verified_by_default_one_shot_ones_only_when_asked():
    assert ScheduleSpec.from_dict({"schedule": EVERY_MINUTE}).verification.enabled
    assert not ScheduleSpec.from_dict({}).verification.enabled
    assert ScheduleSpec.from_dict({"verification": {"enabled": True}}).verification.enabled


def test_every_backup_is_verified_once_before_the_next_slot_starts():
    state = RunState(last_slot=at(0), last_backup_key="k1", backups_since_verification=1)
    step = plan(ScheduleSpec(EVERY_MINUTE, verification=VerificationPolicy(True)), state, CREATED, at(5).timestamp())
    assert step == s.StartVerification(key="k1", attempt=1, message="verifying k1")
    done = dataclasses.replace(state, last_verification_key="k1", backups_since_verification=0)
    assert isinstance(
        plan(ScheduleSpec(EVERY_MINUTE, verification=VerificationPolicy(True)), done, CREATED, at(5).timestamp()),
        s.StartSlot,
    )


def test_a_recorded_slot_is_finished_before_any_verification():
    state = RunState(slot_in_progress="x", last_backup_key="k1", backups_since_verification=3)
    assert isinstance(
        plan(ScheduleSpec(EVERY_MINUTE, verification=VerificationPolicy(True)), state, CREATED, at(5).timestamp()),
        s.RunBackup,
    )


@pytest.mark.parametrize("since, due", [(1, False), (2, False), (3, True)])
def test_every_nth_backup(since, due):
    state = RunState(last_slot=at(0), last_backup_key="k", backups_since_verification=since)
    step = plan(
        ScheduleSpec(EVERY_MINUTE, verification=VerificationPolicy(True, every_n=3)),
        state,
        CREATED,
        at(0.5).timestamp(),
    )
    assert isinstance(step, s.StartVerification) is due


def test_its_own_schedule():
    policy = VerificationPolicy(True, schedule="0 * * * *")
    state = RunState(
        last_slot=at(0),
        last_backup_key="k",
        backups_since_verification=5,
        last_verification_slot=T0.replace(minute=0, second=0),
    )
    assert not isinstance(
        plan(ScheduleSpec(EVERY_MINUTE, verification=policy), state, CREATED, at(0.5).timestamp()), s.StartVerification
    )
    step = plan(ScheduleSpec(EVERY_MINUTE, verification=policy), state, CREATED, at(61).timestamp())
    assert isinstance(step, s.StartVerification) and step.slot_time == T0.replace(hour=13, minute=0, second=0)


def test_suspended_or_refused_runs_no_verification():
    state = RunState(last_backup_key="k", backups_since_verification=1)
    policy = VerificationPolicy(True)
    assert isinstance(plan(ScheduleSpec(EVERY_MINUTE, True, policy), state, CREATED, at(1).timestamp()), s.Suspend)
    assert isinstance(
        plan(ScheduleSpec("0 0 31 2 *", False, policy), state, CREATED, at(1).timestamp()), s.RefuseSchedule
    )


def manifest(**extra) -> Manifest:
    fields = dict(key_count=60, hash_kv=1234, compact_revision=1)
    fields.update(extra)
    return Manifest(
        "p/ns/b/x.db", "b", "ns", "c", "1", "3.6.0", 61, 10, "x" * 64, NOW, "c-0", "x", backup_uid="u", **fields
    )


@pytest.mark.parametrize(
    "answers, verified, reason",
    [
        ((61, 60, 1234, 1), True, "Verified"),
        ((61, 60, 999, 1), False, "HashKVMismatch"),
        ((61, 59, 1234, 1), False, "KeyCountMismatch"),
        ((60, 60, 1234, 1), False, "RevisionMismatch"),
        ((61, 60, 999, 5), None, "HashNotComparable"),
    ],
)
def test_compare(answers, verified, reason):
    verdict = compare(Expected.of(manifest()), *answers)
    assert (verdict.verified, verdict.reason) == (verified, reason)
    # the check container's exit code carries the same verdict to the operator
    assert check_verdict(check_exit_code(verdict), "").verified == verified
    assert check_verdict(check_exit_code(verdict), "").reason == reason


def test_no_source_hash_gives_no_verdict():
    verdict = compare(Expected.of(manifest(hash_kv=None, compact_revision=None)), 61, 60, 1, 1)
    assert verdict.verified is None and verdict.complete
    reported = check_verdict(check_exit_code(verdict), "")
    assert (reported.verified, reported.reason, reported.complete) == (None, "NoSourceHash", True)


@pytest.mark.parametrize("exit_code", [None, 1, 2, 137, CHECK_EXIT_CODES["ScratchMemberUnavailable"]])
def test_an_exit_code_that_names_no_comparison_is_an_attempt_to_retry(exit_code):
    verdict = check_verdict(exit_code, "")
    assert verdict.verified is None and not verdict.complete


def test_the_exit_codes_are_distinct_and_none_is_a_python_crash():
    assert len(set(CHECK_EXIT_CODES.values())) == len(CHECK_EXIT_CODES)
    assert CHECK_EXIT_CODES["Verified"] == 0 and not {1, 2} & set(CHECK_EXIT_CODES.values())


def test_the_check_container_reads_the_manifest_values_the_builder_gave_it():
    env = {
        e["name"]: e["value"]
        for e in next(c for c in scratch_pod()["spec"]["containers"] if c["name"] == CHECK_CONTAINER)["env"]
    }
    assert expected_from(env) == Expected(61, 60, 1234, None)


def comparing(key: str) -> s.FinishVerification:
    return s.FinishVerification(
        key=key, pod_name="b-verify", pod_uid="u1", verified=True, reason="Verified", complete=True
    )


def verified(key: str, ok: bool | None, reason: str = "Verified") -> s.VerificationDone:
    return s.VerificationDone(key=key, verified=ok, reason=reason, message="m", at=NOW)


def degraded(status: dict) -> dict:
    return next(c for c in status["conditions"] if c["type"] == "Degraded")


def test_a_failed_verification_is_degraded_until_a_verification_succeeds():
    record = {"key": "k1"}
    status = {"lastBackup": record, "recentBackups": [record], "backupsSinceVerification": 1}
    status = {**status, **build_status(comparing("k1"), verified("k1", False, "HashKVMismatch"), status, 1, NOW)}
    assert degraded(status)["status"] == "True" and degraded(status)["reason"] == VERIFICATION_FAILED
    assert status["recentBackups"][0]["verification"]["verified"] is False
    assert "lastVerifiedTime" not in status and status["backupsSinceVerification"] == 0
    run = s.RunSucceeded(record={"key": "k2"}, completed_at=NOW)
    status = {**status, **build_status(s.RunBackup(slot="2", one_shot=False), run, status, 1, NOW)}
    assert degraded(status)["reason"] == VERIFICATION_FAILED and status["backupsSinceVerification"] == 1
    status = {**status, **build_status(comparing("k2"), verified("k2", True), status, 1, NOW)}
    assert degraded(status)["status"] == "False" and status["lastVerifiedTime"] == NOW


def test_a_successful_verification_does_not_hide_a_failed_run():
    status = build_status(
        s.RunBackup(slot="a", one_shot=False), s.RunFailed(reason="StorageError", message="x"), {}, 1, NOW
    )
    status = {**status, **build_status(comparing("k0"), verified("k0", True), status, 1, NOW)}
    assert degraded(status)["reason"] == "StorageError"


def scratch_pod() -> dict:
    return verification_pod(
        "b", "ns", "uid", "etcd:v3.6.0", "op:1", {"bucket": "bk"}, "p/x.db", "f" * 64, Expected(61, 60, 1234, None)
    )


def test_the_verification_pod_passes_the_restricted_level():
    pod = scratch_pod()
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    containers = pod["spec"]["initContainers"] + pod["spec"]["containers"]
    for container in containers:
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False and context["capabilities"] == {"drop": ["ALL"]}
    assert all(v.get("emptyDir") is not None for v in pod["spec"]["volumes"])
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "uid"
    assert "--skip-hash-check" not in " ".join(pod["spec"]["initContainers"][1]["args"])


def test_the_scratch_member_listens_on_no_network_address():
    """Its client and peer listeners are unix sockets on the pod's own emptyDir; no metrics
    listener, no container port, no pod IP anywhere in its flags."""
    pod = scratch_pod()
    containers = pod["spec"]["initContainers"] + pod["spec"]["containers"]
    assert all("ports" not in c for c in containers)
    etcd = next(c for c in pod["spec"]["containers"] if c["name"] == "etcd")
    listeners = dict(a.split("=", 1) for a in etcd["args"] if a.startswith(("--listen-", "--advertise-client")))
    # unixs: TLS on the unix socket (the pod's throwaway CA); unix: no TLS
    assert listeners == {
        "--listen-client-urls": "unixs://etcd-client:0",
        "--advertise-client-urls": "unixs://etcd-client:0",
        "--listen-client-http-urls": "unixs://etcd-http:0",  # etcd 3.6.0: HTTP apart, gRPC served natively
        "--listen-peer-urls": "unix://etcd-peer:0",
    }
    assert etcd["workingDir"] == SCRATCH and not any("POD_IP" in str(c) for c in containers)
    check = next(c for c in pod["spec"]["containers"] if c["name"] == CHECK_CONTAINER)
    env = {e["name"]: e["value"] for e in check["env"]}
    assert env["ETCD_SOCKET"] == CLIENT_SOCKET and CLIENT_SOCKET.startswith(SCRATCH + "/")
    assert (
        env["EXPECTED_REVISION"],
        env["EXPECTED_KEY_COUNT"],
        env["EXPECTED_HASH_KV"],
        env["EXPECTED_COMPACT_REVISION"],
    ) == ("61", "60", "1234", "")


def pod_as_observed(phase: str, init: list[dict], check: dict | None = None, owner: str = "backup-uid") -> ScratchPod:
    status = {
        "phase": phase,
        "podIP": "10.0.0.3",
        "initContainerStatuses": init,
        "containerStatuses": [
            {"name": "etcd", "state": {"running": {}}},
            {"name": CHECK_CONTAINER, "state": check or {"running": {}}},
        ],
    }
    return ScratchPod.from_pod(
        {"metadata": {"name": "b-verify", "uid": "u1", "ownerReferences": [{"uid": owner}]}, "status": status},
        "backup-uid",
    )


def test_the_scratch_pod_as_the_planner_sees_it():
    fetching = pod_as_observed(
        "Pending", [{"name": "fetch", "state": {"running": {}}}, {"name": "restore", "state": {"waiting": {}}}]
    )
    assert fetching.owned and fetching.check is None and fetching.init_failure is None
    assert "init container fetch" in fetching.message
    refused = pod_as_observed(
        "Pending",
        [
            {"name": "fetch", "state": {"terminated": {"exitCode": 0}}},
            {"name": "restore", "state": {"terminated": {"exitCode": 2, "message": "x"}}},
        ],
    )
    assert refused.init_failure == InitFailure("restore", 2, "x")
    assert pod_as_observed("Running", []).check is None
    checked = pod_as_observed("Running", [], check={"terminated": {"exitCode": 12, "message": "HashKV differs"}})
    assert checked.check == CheckResult(12, "HashKV differs")
    assert not pod_as_observed("Running", [], owner="someone-else").owned


def test_what_an_init_container_failure_says_about_the_backup():
    assert init_failure_verdict("restore", 1, "").verified is False
    assert init_failure_verdict("fetch", 3, "").reason == "ChecksumMismatch"
    assert init_failure_verdict("fetch", 1, "refused").verified is None  # the store, not the backup
