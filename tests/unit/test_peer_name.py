"""A TLS member's etcd starts once its peer name resolves to its pod IP (or after a bound): the
init container the builder adds, and the wait it runs (etcd_operator/programs/peer_name.py)."""

from __future__ import annotations

import dataclasses

import pytest

from etcd_operator.controllers.cluster.executor import ClusterExecutor
from etcd_operator.controllers.cluster.observer import pod_view
from etcd_operator.core import pod_security
from etcd_operator.core.cluster import builders, naming
from etcd_operator.core.cluster import steps as a
from etcd_operator.core.cluster.spec import ClusterSpec, TLSOptions
from etcd_operator.programs import peer_name
from tests.unit import cluster_scenarios as scenarios
from tests.unit import test_member_add_receivers as receivers

IMAGE = "ghcr.io/etcd-operator/etcd-operator:0.1.0"


def member_pod(tls: bool, joining_image: str | None = IMAGE, **fields) -> dict:
    spec = ClusterSpec.from_dict({"size": 3, **({"tls": {}} if tls else {}), **fields})
    return builders.member_pod(
        spec,
        "c",
        "ns",
        "c-3",
        None,
        "c-0=https://x:2380,c-3=https://y:2380",
        builders.STATE_EXISTING,
        "token",
        joining_image=joining_image,
    )


def test_a_tls_member_waits_for_its_peer_name_in_an_init_container_of_the_operator_image():
    pod = member_pod(tls=True)
    [init] = pod["spec"]["initContainers"]
    assert init["name"] == builders.PEER_NAME_CONTAINER
    assert init["image"] == IMAGE and init["imagePullPolicy"] == "IfNotPresent"
    assert init["command"] == ["python", "-m", "etcd_operator.programs.peer_name"]
    env = {e["name"]: e for e in init["env"]}
    # The name etcd advertises in its peer URL, which its certificate carries.
    assert env["PEER_NAME"]["value"] == naming.member_host("c", "ns", "c-3") == "c-3.c-peer.ns.svc"
    assert naming.peer_url("c", "ns", "c-3", tls=True) == f"https://{env['PEER_NAME']['value']}:{naming.PEER_PORT}"
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert env["PEER_NAME_WAIT_SECONDS"]["value"] == str(builders.PEER_NAME_WAIT_SECONDS)
    assert init["securityContext"] == pod_security.container_security_context()
    # Same requests as etcd: the pod's requests do not change and a quota that needs them admits it.
    assert init["resources"] == pod["spec"]["containers"][0]["resources"]


def test_the_init_container_carries_the_members_resources():
    resources = {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "2Gi"}}
    pod = member_pod(tls=True, pod={"resources": resources})
    assert pod["spec"]["initContainers"][0]["resources"] == resources
    assert pod["spec"]["initContainers"][0]["resources"] is not pod["spec"]["containers"][0]["resources"]


@pytest.mark.parametrize("tls, joining_image", [(False, IMAGE), (True, None)])
def test_no_wait_for_plaintext_members_or_members_that_do_not_join(tls, joining_image):
    # Plaintext peers are not checked by name; a joining member's connections are retried.
    assert "initContainers" not in member_pod(tls=tls, joining_image=joining_image)["spec"]


def test_the_wait_does_not_change_the_spec_hash():
    """Existing members are not rolled when an operator that adds the wait is installed."""
    assert (
        member_pod(tls=True)["metadata"]["annotations"][naming.ANNOTATION_SPEC_HASH]
        == member_pod(tls=True, joining_image=None)["metadata"]["annotations"][naming.ANNOTATION_SPEC_HASH]
    )


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def answers(*results):
    """A resolver that gives each result in turn (an exception is raised), then the last forever."""
    results = list(results)

    def resolve(name: str) -> set[str]:
        assert name == "c-3.c-peer.ns.svc"
        result = results.pop(0) if len(results) > 1 else results[0]
        if isinstance(result, Exception):
            raise result
        return result

    return resolve


def test_a_bootstrap_member_also_waits_for_the_other_members_of_its_initial_cluster():
    env = {e["name"]: e for e in member_pod(tls=True)["spec"]["initContainers"][0]["env"]}
    assert "OTHER_PEER_NAMES" not in env  # a learner's peers run already; one may be gone for good
    bootstrap = builders.member_pod(
        ClusterSpec.from_dict({"size": 3, "tls": {}}),
        "c",
        "ns",
        "c-1",
        None,
        ",".join(f"c-{i}={naming.peer_url('c', 'ns', f'c-{i}', tls=True)}" for i in range(3)),
        builders.STATE_NEW,
        "token",
        joining_image=IMAGE,
    )
    env = {e["name"]: e for e in bootstrap["spec"]["initContainers"][0]["env"]}
    assert env["OTHER_PEER_NAMES"]["value"] == "c-0.c-peer.ns.svc,c-2.c-peer.ns.svc"


def test_another_members_name_is_waited_for_until_it_resolves_to_any_address():
    clock = Clock()
    resolve = answers(OSError("Name or service not known"), set(), {"10.0.0.9"})
    assert peer_name.wait("c-3.c-peer.ns.svc", None, 60, resolve, clock, clock.sleep) == (True, "10.0.0.9")
    assert clock.now == 2 * peer_name.INTERVAL_SECONDS
    clock = Clock()
    resolved, last = peer_name.wait("c-3.c-peer.ns.svc", None, 3, answers(OSError("gone")), clock, clock.sleep)
    assert not resolved and last == "gone" and clock.now <= 3 + peer_name.INTERVAL_SECONDS


def test_the_wait_ends_once_the_name_resolves_to_the_pod_ip():
    clock = Clock()
    resolve = answers(OSError("Name or service not known"), {"10.0.0.9"}, {"10.0.0.9", "10.0.0.7"})
    assert peer_name.wait("c-3.c-peer.ns.svc", "10.0.0.7", 60, resolve, clock, clock.sleep) == (
        True,
        "10.0.0.7, 10.0.0.9",
    )
    assert clock.now == 2 * peer_name.INTERVAL_SECONDS


def test_an_address_of_an_earlier_pod_is_not_enough():
    clock = Clock()
    resolved, last = peer_name.wait("c-3.c-peer.ns.svc", "10.0.0.7", 5, answers({"10.0.0.9"}), clock, clock.sleep)
    assert not resolved and last == "10.0.0.9"


def test_the_wait_is_bounded_and_says_what_it_last_heard():
    clock = Clock()
    resolved, last = peer_name.wait(
        "c-3.c-peer.ns.svc", "10.0.0.7", 60, answers(OSError("Name or service not known")), clock, clock.sleep
    )
    assert not resolved and last == "Name or service not known"
    assert 60 <= clock.now <= 60 + peer_name.INTERVAL_SECONDS


def test_ipv6_addresses_compare_by_value():
    clock = Clock()
    assert peer_name.wait("c-3.c-peer.ns.svc", "fd00::7", 5, answers({"fd00:0:0::7"}), clock, clock.sleep)[0]


def test_main_starts_etcd_either_way(monkeypatch, capsys):
    monkeypatch.setattr(peer_name, "wait", lambda name, ip, seconds: (False, "Name or service not known"))
    assert peer_name.main({"PEER_NAME": "c-3.c-peer.ns.svc", "POD_IP": "10.0.0.7", "PEER_NAME_WAIT_SECONDS": "60"}) == 0
    err = capsys.readouterr().err
    assert "c-3.c-peer.ns.svc did not resolve to 10.0.0.7 within 60s" in err and "starting etcd anyway" in err
    monkeypatch.setattr(peer_name, "wait", lambda name, ip, seconds: (True, "10.0.0.7"))
    assert peer_name.main({"PEER_NAME": "c-3.c-peer.ns.svc", "POD_IP": "10.0.0.7"}) == 0
    assert "c-3.c-peer.ns.svc resolves to 10.0.0.7" in capsys.readouterr().out


def test_a_broken_init_container_makes_the_pod_broken():
    """An operator image that cannot be pulled shows in the init container's status only."""
    pod = {
        "metadata": {"name": "c-3", "uid": "u"},
        "status": {
            "phase": "Pending",
            "initContainerStatuses": [{"name": "peer-name", "state": {"waiting": {"reason": "ErrImagePull"}}}],
            "containerStatuses": [{"name": "etcd", "state": {"waiting": {"reason": "PodInitializing"}}}],
        },
    }
    assert pod_view(pod).waiting_reason == "ErrImagePull"


def tls_spec(size: int) -> ClusterSpec:
    return dataclasses.replace(scenarios.spec(size), tls=TLSOptions(enabled=True))


def created_pod(kube: receivers.FakeKube) -> dict:
    return next(m for m in kube.created if m["kind"] == "Pod")


@pytest.mark.asyncio
async def test_the_executor_gives_the_wait_to_a_learners_first_pod():
    o = scenarios.observed([scenarios.M(0), scenarios.M(1), scenarios.M(2)])
    pool = receivers.FakePool({"10.0.0.0:2379": receivers.FakeMember("10.0.0.0:2379", receivers._added(0))})
    kube = receivers.FakeKube()
    executor = ClusterExecutor(
        kube, pool, receivers.BODY, lambda *_: None, operator_image=IMAGE, status=scenarios.RECORDED, now=scenarios.NOW
    )
    assert (await executor.run(a.AddLearner("scaling up", "c-3"), tls_spec(5), o)).done
    [init] = created_pod(kube)["spec"]["initContainers"]
    assert init["image"] == IMAGE and init["name"] == builders.PEER_NAME_CONTAINER


@pytest.mark.asyncio
@pytest.mark.parametrize("joined_before, waits", [(False, True), (True, False)])
async def test_a_member_that_restarts_on_its_data_does_not_wait(joined_before, waits):
    """It retries its peers until they accept it; only a joining etcd exits when refused."""
    o = scenarios.observed([scenarios.M(0), scenarios.M(1), scenarios.M(2)])
    kube = receivers.FakeKube()
    executor = ClusterExecutor(
        kube, None, receivers.BODY, lambda *_: None, operator_image=IMAGE, status=scenarios.RECORDED, now=scenarios.NOW
    )
    action = a.CreateMemberPod("start", "c-3", 0x103, "c-3=https://c-3.c-peer.ns.svc:2380", joined_before=joined_before)
    assert (await executor.run(action, tls_spec(3), o)).done
    assert ("initContainers" in created_pod(kube)["spec"]) is waits


class DryRunKube:
    """Takes dry runs only, and remembers the pods they carried."""

    def __init__(self):
        self.dry_runs = []

    async def create(self, resource, namespace, manifest, dry_run=False):
        assert dry_run, "a dry run step created an object"
        self.dry_runs.append(manifest)


@pytest.mark.asyncio
@pytest.mark.parametrize("before, waits", [("AddLearner", True), ("RollMember", False)])
async def test_the_dry_run_asks_about_the_pod_the_step_will_create(before, waits):
    """Before an add, the joining pod with its init container in the operator's image (which
    a policy may refuse where etcd's image passes); before a roll, the re-created pod."""
    o = scenarios.observed([scenarios.M(0), scenarios.M(1), scenarios.M(2)])
    kube = DryRunKube()
    executor = ClusterExecutor(
        kube, None, receivers.BODY, lambda *_: None, operator_image=IMAGE, status=scenarios.RECORDED, now=scenarios.NOW
    )
    action = a.CheckPodSpec("asking", "c-3", 0, "hash", before)
    assert (await executor.run(action, tls_spec(3), o)).done
    [pod] = kube.dry_runs
    assert ("initContainers" in pod["spec"]) is waits
