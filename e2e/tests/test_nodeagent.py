"""The process node agent against the real kube-apiserver and kube-controller-manager:
pods become local processes with addresses, names, volumes, probes, restarts and faults."""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import time
import urllib.request

import pytest
from kubernetes import client, watch

from localkube import controlplane, processes
from nodeagent import faults
from nodeagent.paths import Paths
from tests.support.waiting import holds_throughout

pytestmark = pytest.mark.substrate

ETCD_IMAGE = "quay.io/coreos/etcd:v3.5.35"
OPERATOR_IMAGE = "ghcr.io/etcd-operator/etcd-operator:0.1.0"
BUSYBOX = "busybox:1.36"


# --- helpers ---------------------------------------------------------------------------


def wait_until(check, timeout: float = 30, interval: float = 0.2, what: str = "condition"):
    """Polls check() until it returns something truthy; fails after timeout seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            last = check()
        except client.ApiException as e:
            last = e
            if e.status != 404:
                raise
        if last and not isinstance(last, Exception):
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last seen: {last!r}")
        time.sleep(interval)


def core(kube_api) -> client.CoreV1Api:
    return client.CoreV1Api(kube_api)


def as_dict(kube_api, obj) -> dict:
    return kube_api.sanitize_for_serialization(obj)


def get_pod(kube_api, namespace: str, name: str) -> dict:
    return as_dict(kube_api, core(kube_api).read_namespaced_pod(name, namespace))


def condition(pod: dict, kind: str) -> str | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c["type"] == kind:
            return c["status"]
    return None


def container_status(pod: dict, name: str, init: bool = False) -> dict:
    key = "initContainerStatuses" if init else "containerStatuses"
    return next((s for s in (pod.get("status") or {}).get(key) or [] if s["name"] == name), {})


def wait_ready(kube_api, namespace: str, name: str, timeout: float = 30) -> dict:
    def ready():
        pod = get_pod(kube_api, namespace, name)
        return pod if condition(pod, "Ready") == "True" else None

    return wait_until(ready, timeout, what=f"pod {namespace}/{name} Ready")


def wait_phase(kube_api, namespace: str, name: str, phase: str, timeout: float = 30) -> dict:
    def reached():
        pod = get_pod(kube_api, namespace, name)
        return pod if pod["status"].get("phase") == phase else None

    return wait_until(reached, timeout, what=f"pod {namespace}/{name} in phase {phase}")


def wait_gone(kube_api, namespace: str, name: str, timeout: float = 30) -> None:
    def gone():
        try:
            core(kube_api).read_namespaced_pod(name, namespace)
        except client.ApiException as e:
            if e.status == 404:
                return True
            raise
        return False

    wait_until(gone, timeout, what=f"pod {namespace}/{name} to be deleted")


def container(name: str, script: str | None = None, image: str = BUSYBOX, **extra) -> dict:
    c = {"name": name, "image": image, **extra}
    if script is not None:
        c["command"] = ["sh", "-c", script]
    return c


def pod_manifest(name: str, containers: list[dict], **spec) -> dict:
    labels = spec.pop("labels", {"test": name})
    spec.setdefault("terminationGracePeriodSeconds", 2)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": containers, **spec},
    }


def create_pod(kube_api, namespace: str, manifest: dict) -> None:
    core(kube_api).create_namespaced_pod(namespace, manifest)


def scratch_volume(name: str = "work") -> dict:
    return {"name": name, "emptyDir": {}}


def mount(name: str, path: str, **extra) -> dict:
    return {"name": name, "mountPath": path, **extra}


POD_IP_ENV = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]


def our_nodes(kube_api) -> list[str]:
    names = [n.metadata.name for n in core(kube_api).list_node().items]
    return sorted(n for n in names if n.startswith("localkube-node-"))


def exec_probe(command: str, **timing) -> dict:
    return {"exec": {"command": ["sh", "-c", command]}, "periodSeconds": 1, "failureThreshold": 1, **timing}


def log_of(where, namespace: str, pod: str, container_name: str) -> str:
    return faults.read_log(namespace, pod, container_name, where=where)


# --- etcd: a three-member cluster with DNS peer URLs -----------------------------------


def etcd_member(namespace: str, index: int) -> dict:
    name = f"etcd-{index}"
    peers = ",".join(f"etcd-{i}=http://etcd-{i}.etcd.{namespace}.svc:2380" for i in range(3))
    env = POD_IP_ENV + [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    command = [
        "etcd",
        "--name=$(POD_NAME)",
        "--data-dir=/var/lib/etcd/data",
        "--listen-client-urls=http://$(POD_IP):2379",
        f"--advertise-client-urls=http://$(POD_NAME).etcd.{namespace}.svc:2379",
        "--listen-peer-urls=http://$(POD_IP):2380",
        f"--initial-advertise-peer-urls=http://$(POD_NAME).etcd.{namespace}.svc:2380",
        f"--initial-cluster={peers}",
        "--initial-cluster-state=new",
        f"--initial-cluster-token={namespace}",
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]
    return pod_manifest(
        name,
        [
            container(
                "etcd",
                image=ETCD_IMAGE,
                command=command,
                env=env,
                ports=[{"name": "client", "containerPort": 2379}, {"name": "peer", "containerPort": 2380}],
                readinessProbe={
                    "httpGet": {"path": "/health", "port": 2379},
                    "periodSeconds": 1,
                    "failureThreshold": 3,
                    "timeoutSeconds": 2,
                },
                volumeMounts=[mount("data", "/var/lib/etcd")],
            )
        ],
        labels={"app": "etcd"},
        hostname=name,
        subdomain="etcd",
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": f"data-{name}"}}],
        terminationGracePeriodSeconds=5,
    )


def claim(name: str, size: str = "64Mi") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}},
    }


def resolve(name: str) -> set[str]:
    return {info[4][0] for info in socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)}


def resolve_or_none(name: str) -> set[str] | None:
    try:
        return resolve(name)
    except socket.gaierror:
        return None


def etcdctl(where, endpoints: list[str], *args: str) -> str:
    binary = where.binary("etcd-3.5", "etcdctl")
    result = subprocess.run(
        [
            str(binary),
            f"--endpoints={','.join(f'http://{ip}:2379' for ip in endpoints)}",
            "--command-timeout=5s",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "ETCDCTL_API": "3"},
    )
    assert result.returncode == 0, f"etcdctl {args} failed: {result.stderr}"
    return result.stdout


def test_etcd_cluster_survives_member_crash_and_pod_recreation(substrate, kube_api, namespace):
    api = core(kube_api)
    api.create_namespaced_service(
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "etcd"},
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": {"app": "etcd"},
                "ports": [{"name": "client", "port": 2379}, {"name": "peer", "port": 2380}],
            },
        },
    )
    for i in range(3):
        api.create_namespaced_persistent_volume_claim(namespace, claim(f"data-etcd-{i}"))
        create_pod(kube_api, namespace, etcd_member(namespace, i))
    pods = [wait_ready(kube_api, namespace, f"etcd-{i}", timeout=60) for i in range(3)]
    ips = [p["status"]["podIP"] for p in pods]
    assert len(set(ips)) == 3 and all(ip.startswith(f"127.{substrate.pod_subnet_octet}.") for ip in ips)

    # names resolve through /etc/hosts: members and the headless service
    assert resolve(f"etcd-0.etcd.{namespace}.svc") == {ips[0]}
    assert resolve(f"etcd.{namespace}.svc.cluster.local") == set(ips)

    etcdctl(substrate, ips, "put", "greeting", "hello")
    assert etcdctl(substrate, ips, "get", "greeting", "--print-value-only").strip() == "hello"
    members = etcdctl(substrate, ips[:1], "member", "list")
    assert all(f"etcd-{i}.etcd.{namespace}.svc:2380" in members for i in range(3))

    # kill -9 of one member: restarted in place with its data
    old_pid = faults.crash_container(namespace, "etcd-0", where=substrate)

    def restarted():
        pod = get_pod(kube_api, namespace, "etcd-0")
        return (
            pod
            if container_status(pod, "etcd").get("restartCount", 0) >= 1 and condition(pod, "Ready") == "True"
            else None
        )

    pod = wait_until(restarted, 40, what="etcd-0 restarted and Ready")
    assert container_status(pod, "etcd")["lastState"]["terminated"]["exitCode"] == 137
    assert faults.container_pid(namespace, "etcd-0", "etcd", where=substrate) not in (None, old_pid)
    assert etcdctl(substrate, ips[:1], "get", "greeting", "--print-value-only", "--consistency=s").strip() == "hello"

    # delete a member's pod and create it again with the same claim: the data stays
    api.delete_namespaced_pod("etcd-1", namespace)
    wait_gone(kube_api, namespace, "etcd-1")
    etcdctl(substrate, [ips[0], ips[2]], "put", "while-away", "yes")
    create_pod(kube_api, namespace, etcd_member(namespace, 1))
    new_ip = wait_ready(kube_api, namespace, "etcd-1", timeout=60)["status"]["podIP"]
    assert new_ip != ips[1]

    def caught_up():
        try:
            out = etcdctl(substrate, [new_ip], "get", "while-away", "--print-value-only", "--consistency=s")
        except AssertionError:
            return False
        return out.strip() == "yes"

    wait_until(caught_up, 30, what="recreated member to catch up")
    assert etcdctl(substrate, [new_ip], "get", "greeting", "--print-value-only", "--consistency=s").strip() == "hello"


def test_kubectl_run_etcd_is_running_and_ready(substrate, kube_api, namespace):
    kubectl = substrate.binary("kube", "kubectl")
    subprocess.run(
        [
            str(kubectl),
            "--kubeconfig",
            str(substrate.kubeconfig),
            "-n",
            namespace,
            "run",
            "solo",
            f"--image={ETCD_IMAGE}",
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    pod = wait_ready(kube_api, namespace, "solo")
    assert pod["status"]["phase"] == "Running"
    health = subprocess.run(
        [
            str(substrate.binary("etcd-3.5", "etcdctl")),
            f"--endpoints=http://{pod['status']['podIP']}:2379",
            "endpoint",
            "health",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert health.returncode == 0 and "is healthy" in health.stdout + health.stderr
    wait_until(
        lambda: "ready to serve client requests" in log_of(substrate, namespace, "solo", "solo"),
        10,
        what="etcd's startup message in the container log",
    )


# --- lifecycle -------------------------------------------------------------------------


def test_init_containers_run_in_order_and_failures_follow_restart_policy(substrate, kube_api, namespace):
    flaky_second = (
        "n=$(cat /w/tries 2>/dev/null || echo 0); echo $((n+1)) > /w/tries; echo second >> /w/order; [ $n -ge 1 ]"
    )
    create_pod(
        kube_api,
        namespace,
        pod_manifest(
            "ordered",
            [container("main", "cat /w/order; exec sleep 3600", volumeMounts=[mount("work", "/w")])],
            initContainers=[
                container("first", "echo first >> /w/order", volumeMounts=[mount("work", "/w")]),
                container("second", flaky_second, volumeMounts=[mount("work", "/w")]),
            ],
            volumes=[scratch_volume()],
        ),
    )
    create_pod(
        kube_api,
        namespace,
        pod_manifest(
            "broken",
            [container("main", "echo must-not-run")],
            initContainers=[container("setup", "exit 2")],
            restartPolicy="Never",
        ),
    )
    pod = wait_ready(kube_api, namespace, "ordered")
    assert container_status(pod, "first", init=True)["state"]["terminated"]["reason"] == "Completed"
    assert container_status(pod, "second", init=True)["restartCount"] == 1
    assert condition(pod, "Initialized") == "True"
    wait_until(
        lambda: log_of(substrate, namespace, "ordered", "main").split() == ["first", "second", "second"],
        10,
        what="main container to print the init order",
    )

    pod = wait_phase(kube_api, namespace, "broken", "Failed")
    setup = container_status(pod, "setup", init=True)["state"]["terminated"]
    assert (setup["exitCode"], setup["reason"]) == (2, "Error")
    assert condition(pod, "Initialized") == "False"
    assert "waiting" in container_status(pod, "main")["state"]
    assert log_of(substrate, namespace, "broken", "main") == ""


def test_restart_policies_with_backoff(substrate, kube_api, namespace):
    create_pod(kube_api, namespace, pod_manifest("always", [container("c", "echo run; exit 1")]))
    flaky = "n=$(cat /w/n 2>/dev/null || echo 0); echo $((n+1)) > /w/n; echo try $n; [ $n -ge 2 ]"
    create_pod(
        kube_api,
        namespace,
        pod_manifest(
            "onfailure",
            [container("c", flaky, volumeMounts=[mount("work", "/w")])],
            restartPolicy="OnFailure",
            volumes=[scratch_volume()],
        ),
    )
    create_pod(kube_api, namespace, pod_manifest("never", [container("c", "exit 3")], restartPolicy="Never"))

    # Always: restarts come with growing gaps (back-off base 1 s: 1, 2, 4 ...)
    seen_at: dict[int, float] = {}
    reasons = set()

    def third_restart():
        status = container_status(get_pod(kube_api, namespace, "always"), "c")
        count = status.get("restartCount", 0)
        seen_at.setdefault(count, time.monotonic())
        reasons.update(v.get("reason") for v in status.get("state", {}).values())
        return count >= 3

    wait_until(third_restart, 30, interval=0.1, what="three restarts")
    assert "CrashLoopBackOff" in reasons
    gap_1_2, gap_2_3 = seen_at[2] - seen_at[1], seen_at[3] - seen_at[2]
    assert gap_2_3 > gap_1_2 + 0.7, f"back-off did not grow: {gap_1_2:.1f}s then {gap_2_3:.1f}s"

    pod = wait_phase(kube_api, namespace, "onfailure", "Succeeded")
    status = container_status(pod, "c")
    assert status["restartCount"] == 2 and status["state"]["terminated"]["exitCode"] == 0
    assert condition(pod, "Ready") == "False"

    pod = wait_phase(kube_api, namespace, "never", "Failed")
    status = container_status(pod, "c")
    assert status["restartCount"] == 0
    assert status["state"]["terminated"]["exitCode"] == 3 and status["state"]["terminated"]["reason"] == "Error"
    assert log_of(substrate, namespace, "always", "c").count("run") >= 4  # appended across restarts


def test_readiness_probes_http_tcp_and_exec(substrate, kube_api, namespace):
    server = "exec python -m http.server {port} --bind $POD_IP"
    core(kube_api).create_namespaced_service(
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "front"},
            "spec": {"selector": {"role": "http"}, "ports": [{"port": 8080}]},
        },
    )
    create_pod(
        kube_api,
        namespace,
        pod_manifest(
            "web",
            [
                container(
                    "http",
                    server.format(port=8080),
                    image=OPERATOR_IMAGE,
                    env=POD_IP_ENV,
                    readinessProbe={"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1},
                ),
                container(
                    "tcp",
                    server.format(port=8081),
                    image=OPERATOR_IMAGE,
                    env=POD_IP_ENV,
                    ports=[{"name": "alt", "containerPort": 8081}],
                    readinessProbe={"tcpSocket": {"port": "alt"}, "periodSeconds": 1},
                ),
            ],
            labels={"role": "http"},
        ),
    )
    create_pod(
        kube_api,
        namespace,
        pod_manifest(
            "missing-page",
            [
                container(
                    "http",
                    server.format(port=8080),
                    image=OPERATOR_IMAGE,
                    env=POD_IP_ENV,
                    readinessProbe={"httpGet": {"path": "/nothing-here", "port": 8080}, "periodSeconds": 1},
                ),
            ],
            labels={"role": "http"},
        ),
    )
    create_pod(
        kube_api,
        namespace,
        pod_manifest(
            "exec",
            [
                container(
                    "c",
                    "sleep 2; touch /w/ready; exec sleep 3600",
                    volumeMounts=[mount("work", "/w")],
                    readinessProbe=exec_probe("test -f /w/ready"),
                ),
            ],
            volumes=[scratch_volume()],
        ),
    )

    pod = get_pod(kube_api, namespace, "exec")
    assert condition(pod, "Ready") != "True"
    web_ip = wait_ready(kube_api, namespace, "web")["status"]["podIP"]
    wait_ready(kube_api, namespace, "exec")
    # a ClusterIP service name resolves to its ready pods only
    wait_until(lambda: resolve_or_none(f"front.{namespace}.svc") == {web_ip}, 10, what="the service name")

    def running_but_unready():
        status = container_status(get_pod(kube_api, namespace, "missing-page"), "http")
        return "running" in status.get("state", {}) and status["ready"] is False

    wait_until(running_but_unready, 10, what="a running container failing its httpGet probe")
    events = core(kube_api).list_namespaced_event(namespace, field_selector="involvedObject.name=missing-page")
    assert any(e.reason == "Unhealthy" and "404" in e.message for e in events.items)


def test_two_pods_binding_the_wildcard_address_run_side_by_side(substrate, kube_api, namespace):
    """Both bind 0.0.0.0:8080, as servers in real pods do: one in its args, one through an
    environment variable. Each must own port 8080 on its own pod IP only."""
    names = {"name": {"fieldRef": {"fieldPath": "metadata.name"}}}
    site = {"name": "site", "downwardAPI": {"items": [{"path": k, **v} for k, v in names.items()]}}
    serve = ["python3", "-m", "http.server", "8080", "--directory", "/srv", "--bind"]
    probe = {"httpGet": {"path": "/name", "port": 8080}, "periodSeconds": 1}
    create_pod(
        kube_api,
        namespace,
        pod_manifest(
            "wide-args",
            [
                container(
                    "http",
                    image=OPERATOR_IMAGE,
                    command=serve + ["0.0.0.0"],
                    readinessProbe=probe,
                    volumeMounts=[mount("site", "/srv")],
                ),
            ],
            volumes=[site],
        ),
    )
    create_pod(
        kube_api,
        namespace,
        pod_manifest(
            "wide-env",
            [
                container(
                    "http",
                    image=OPERATOR_IMAGE,
                    command=serve + ["$(BIND)"],
                    readinessProbe=probe,
                    env=[{"name": "BIND", "value": "0.0.0.0"}],
                    volumeMounts=[mount("site", "/srv")],
                ),
            ],
            volumes=[site],
        ),
    )
    for name in ("wide-args", "wide-env"):
        ip = wait_ready(kube_api, namespace, name)["status"]["podIP"]
        with urllib.request.urlopen(f"http://{ip}:8080/name", timeout=5) as reply:
            assert reply.read().decode() == name
        assert container_status(get_pod(kube_api, namespace, name), "http")["restartCount"] == 0


def test_liveness_and_startup_probes_restart_containers(substrate, kube_api, namespace):
    create_pod(
        kube_api,
        namespace,
        pod_manifest(
            "liveness",
            [
                container(
                    "c",
                    "touch /w/alive; sleep 1; rm /w/alive; exec sleep 3600",
                    volumeMounts=[mount("work", "/w")],
                    livenessProbe=exec_probe("test -f /w/alive", initialDelaySeconds=1),
                ),
            ],
            volumes=[scratch_volume()],
        ),
    )
    create_pod(
        kube_api,
        namespace,
        pod_manifest(
            "slow-start",
            [
                container(
                    "c",
                    "sleep 2; touch /w/started; exec sleep 3600",
                    volumeMounts=[mount("work", "/w")],
                    startupProbe=exec_probe("test -f /w/started", failureThreshold=20),
                    livenessProbe=exec_probe("test -f /w/started"),
                ),
            ],
            volumes=[scratch_volume()],
        ),
    )
    create_pod(
        kube_api,
        namespace,
        pod_manifest(
            "never-starts",
            [
                container("c", "exec sleep 3600", startupProbe=exec_probe("false", failureThreshold=2)),
            ],
        ),
    )

    def started_false_while_running():
        status = container_status(get_pod(kube_api, namespace, "slow-start"), "c")
        return "running" in status.get("state", {}) and status["started"] is False and not status["ready"]

    wait_until(started_false_while_running, 10, interval=0.1, what="slow-start running but not started")
    pod = wait_ready(kube_api, namespace, "slow-start")
    assert container_status(pod, "c")["started"] is True and container_status(pod, "c")["restartCount"] == 0

    def restarted(name):
        def check():
            status = container_status(get_pod(kube_api, namespace, name), "c")
            return status if status.get("restartCount", 0) >= 1 else None

        return check

    status = wait_until(restarted("liveness"), 20, what="liveness failure to restart the container")
    assert status["lastState"]["terminated"]["exitCode"] in (137, 143)
    wait_until(restarted("never-starts"), 20, what="startup failure to restart the container")


def test_environment_expansion_and_references(substrate, kube_api, namespace):
    api = core(kube_api)
    api.create_namespaced_secret(
        namespace, {"metadata": {"name": "creds"}, "data": {"password": base64.b64encode(b"s3cret").decode()}}
    )
    api.create_namespaced_config_map(
        namespace, {"metadata": {"name": "settings"}, "data": {"mode": "fast", "level": "3"}}
    )
    env = [
        {"name": "A", "value": "alpha"},
        {"name": "B", "value": "$(A)-beta"},
        {"name": "C", "value": "$$(A)"},
        {"name": "D", "value": "$(NOT_DEFINED)"},
        {"name": "MY_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "MY_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "MY_NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "MY_SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
        {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}},
        {"name": "ABSENT", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "nope", "optional": True}}},
        {"name": "ABSENT_CM", "valueFrom": {"configMapKeyRef": {"name": "no-such-map", "key": "k", "optional": True}}},
    ]
    create_pod(
        kube_api,
        namespace,
        pod_manifest(
            "env",
            [
                container(
                    "c",
                    command=["sh", "-c", 'env | sort; echo "ARGS $1 $2 $3"', "sh"],
                    args=["$(A)", "$$(A)", "$(B)"],
                    env=env,
                    envFrom=[{"configMapRef": {"name": "settings"}, "prefix": "CFG_"}],
                )
            ],
            restartPolicy="Never",
            hostname="custom-host",
        ),
    )
    create_pod(
        kube_api,
        namespace,
        pod_manifest(
            "missing-key",
            [
                container(
                    "c", "true", env=[{"name": "X", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "nope"}}}]
                )
            ],
        ),
    )

    pod = wait_phase(kube_api, namespace, "env", "Succeeded")
    lines = set(log_of(substrate, namespace, "env", "c").splitlines())
    expected = {
        "A=alpha",
        "B=alpha-beta",
        "C=$(A)",
        "D=$(NOT_DEFINED)",
        "MY_NAME=env",
        f"MY_NS={namespace}",
        f"MY_IP={pod['status']['podIP']}",
        f"MY_NODE={pod['spec']['nodeName']}",
        "MY_SA=default",
        "PASSWORD=s3cret",
        "MODE=fast",
        "CFG_mode=fast",
        "CFG_level=3",
        "HOSTNAME=custom-host",
        "ARGS alpha $(A) alpha-beta",
    }
    assert expected <= lines, expected - lines
    assert not any(line.startswith(("ABSENT=", "ABSENT_CM=", "KUBECONFIG=")) for line in lines)

    def config_error():
        state = container_status(get_pod(kube_api, namespace, "missing-key"), "c").get("state", {})
        return state.get("waiting", {}).get("reason") == "CreateContainerConfigError" and state

    state = wait_until(config_error, 10, what="CreateContainerConfigError")
    assert "nope" in state["waiting"]["message"]


def test_secret_and_configmap_volumes(substrate, kube_api, namespace):
    api = core(kube_api)
    api.create_namespaced_secret(
        namespace,
        {
            "metadata": {"name": "creds"},
            "data": {"user": base64.b64encode(b"admin").decode(), "password": base64.b64encode(b"s3cret").decode()},
        },
    )
    api.create_namespaced_config_map(
        namespace, {"metadata": {"name": "app"}, "data": {"app.conf": "x=1", "other": "y"}}
    )
    script = (
        "echo secret=$(cat /var/lib/localkube-test/secret/nested/password); "
        "echo mode=$(stat -c %a /var/lib/localkube-test/secret/nested/password); "
        "echo listing=$(ls /var/lib/localkube-test/secret | tr '\\n' ,); "
        "echo conf=$(cat /var/lib/localkube-test/config/app.conf) other=$(cat /var/lib/localkube-test/config/other); "
        "echo file=$(cat /var/lib/localkube-test/etc/app.conf); "
        "(echo z > /var/lib/localkube-test/config/new) 2>/dev/null && echo config=writable || echo config=readonly"
    )
    create_pod(
        kube_api,
        namespace,
        pod_manifest(
            "volumes",
            [
                container(
                    "c",
                    script,
                    volumeMounts=[
                        mount("secret", "/var/lib/localkube-test/secret"),
                        mount("config", "/var/lib/localkube-test/config"),
                        mount("config", "/var/lib/localkube-test/etc/app.conf", subPath="app.conf"),
                    ],
                )
            ],
            restartPolicy="Never",
            volumes=[
                {
                    "name": "secret",
                    "secret": {
                        "secretName": "creds",
                        "defaultMode": 0o400,
                        "items": [{"key": "password", "path": "nested/password"}],
                    },
                },
                {"name": "config", "configMap": {"name": "app"}},
            ],
        ),
    )
    wait_phase(kube_api, namespace, "volumes", "Succeeded")
    lines = set(log_of(substrate, namespace, "volumes", "c").splitlines())
    assert {
        "secret=s3cret",
        "mode=400",
        "listing=nested,",
        "conf=x=1 other=y",
        "file=x=1",
        "config=readonly",
    } <= lines, lines


def test_a_secret_update_reaches_a_running_pod_in_one_step(substrate, kube_api, namespace):
    """As on a kubelet: the files follow the Secret, and change together (the ..data swap)."""
    api = core(kube_api)

    def secret(version: str) -> dict:
        return {
            "metadata": {"name": "pair"},
            "data": {k: base64.b64encode(f"{k}-{version}".encode()).decode() for k in ("tls.crt", "tls.key")},
        }

    api.create_namespaced_secret(namespace, secret("v1"))
    create_pod(
        kube_api,
        namespace,
        pod_manifest(
            "follower",
            [
                container("c", "exec sleep 3600", volumeMounts=[mount("pair", "/etc/pair")]),
            ],
            volumes=[{"name": "pair", "secret": {"secretName": "pair"}}],
        ),
    )
    uid = wait_ready(kube_api, namespace, "follower")["metadata"]["uid"]
    volume = Paths(substrate.state_dir).volume_dir(uid, "pair")
    assert (volume / "tls.crt").read_text() == "tls.crt-v1"
    first = os.readlink(volume / "..data")
    api.replace_namespaced_secret("pair", namespace, secret("v2"))
    wait_until(lambda: (volume / "tls.key").read_text() == "tls.key-v2", 30, what="the Secret update in the volume")
    assert (volume / "tls.crt").read_text() == "tls.crt-v2"
    assert os.readlink(volume / "tls.crt") == "..data/tls.crt" and os.readlink(volume / "..data") != first


def test_empty_dir_is_removed_with_the_pod(substrate, kube_api, namespace):
    create_pod(
        kube_api,
        namespace,
        pod_manifest(
            "scratch",
            [
                container(
                    "c", "echo data > /scratch/file; exec sleep 3600", volumeMounts=[mount("scratch", "/scratch")]
                ),
            ],
            volumes=[scratch_volume("scratch")],
        ),
    )
    uid = wait_ready(kube_api, namespace, "scratch")["metadata"]["uid"]
    host_file = Paths(substrate.state_dir).volume_dir(uid, "scratch") / "file"
    wait_until(host_file.exists, 10, what="the file in the emptyDir's host directory")
    core(kube_api).delete_namespaced_pod("scratch", namespace)
    wait_gone(kube_api, namespace, "scratch")
    wait_until(lambda: not host_file.parent.exists(), 10, what="the emptyDir to be removed")


def test_persistent_volume_claims_are_provisioned_and_deleted(substrate, kube_api, namespace):
    api, storage = core(kube_api), client.StorageV1Api(kube_api)
    default = storage.read_storage_class("localkube")
    assert default.provisioner == "localkube.local/hostpath" and default.allow_volume_expansion
    assert default.metadata.annotations["storageclass.kubernetes.io/is-default-class"] == "true"
    api.create_namespaced_persistent_volume_claim(namespace, claim("data"))
    bound = wait_until(
        lambda: (c := api.read_namespaced_persistent_volume_claim("data", namespace)).status.phase == "Bound" and c,
        30,
        what="the claim to bind",
    )
    assert bound.spec.storage_class_name == "localkube"
    pv = api.read_persistent_volume(bound.spec.volume_name)
    directory = pv.spec.host_path.path
    assert pv.spec.claim_ref.uid == bound.metadata.uid and os.path.isdir(directory)

    # expansion: the provisioner grows the PV and reports the new capacity
    api.patch_namespaced_persistent_volume_claim(
        "data", namespace, {"spec": {"resources": {"requests": {"storage": "128Mi"}}}}
    )
    wait_until(
        lambda: api.read_namespaced_persistent_volume_claim("data", namespace).status.capacity["storage"] == "128Mi",
        20,
        what="the claim to be expanded",
    )
    assert api.read_persistent_volume(pv.metadata.name).spec.capacity["storage"] == "128Mi"

    create_pod(
        kube_api,
        namespace,
        pod_manifest(
            "writer",
            [container("c", "echo kept > /data/file", volumeMounts=[mount("data", "/data")])],
            restartPolicy="Never",
            volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        ),
    )
    wait_phase(kube_api, namespace, "writer", "Succeeded")
    assert open(os.path.join(directory, "file")).read() == "kept\n"

    api.delete_namespaced_pod("writer", namespace)
    wait_gone(kube_api, namespace, "writer")
    api.delete_namespaced_persistent_volume_claim("data", namespace)

    def volume_gone():
        try:
            api.read_persistent_volume(pv.metadata.name)
        except client.ApiException as e:
            return e.status == 404
        return False

    wait_until(volume_gone, 30, what="the released PV to be deleted")
    assert not os.path.exists(directory)


def test_termination_grace_then_sigkill(substrate, kube_api, namespace):
    create_pod(
        kube_api,
        namespace,
        pod_manifest(
            "stubborn",
            [container("c", "trap 'echo got TERM' TERM; while true; do sleep 0.2; done")],
            terminationGracePeriodSeconds=3,
        ),
    )
    create_pod(
        kube_api,
        namespace,
        pod_manifest("polite", [container("c", "exec sleep 3600")], terminationGracePeriodSeconds=30),
    )
    wait_ready(kube_api, namespace, "stubborn")
    wait_ready(kube_api, namespace, "polite")
    pid = faults.container_pid(namespace, "stubborn", "c", where=substrate)

    began = time.monotonic()
    core(kube_api).delete_namespaced_pod("polite", namespace)
    wait_gone(kube_api, namespace, "polite")
    assert time.monotonic() - began < 5, "a process that exits on SIGTERM should not wait for the grace"

    began = time.monotonic()
    core(kube_api).delete_namespaced_pod("stubborn", namespace)
    wait_gone(kube_api, namespace, "stubborn", timeout=20)
    elapsed = time.monotonic() - began
    assert 2.5 <= elapsed < 10, f"pod released after {elapsed:.1f}s, grace was 3s"
    assert "got TERM" in log_of(substrate, namespace, "stubborn", "c")
    assert not processes.alive(pid)


def test_unknown_image_waits_in_image_pull_backoff(substrate, kube_api, namespace):
    create_pod(kube_api, namespace, pod_manifest("nginx", [container("web", image="nginx:1.27")]))
    reasons, message = [], ""
    stream = watch.Watch()
    for event in stream.stream(
        core(kube_api).list_namespaced_pod, namespace, field_selector="metadata.name=nginx", timeout_seconds=30
    ):
        status = container_status(as_dict(kube_api, event["object"]), "web")
        waiting = status.get("state", {}).get("waiting", {})
        if waiting.get("reason") and (not reasons or reasons[-1] != waiting["reason"]):
            reasons.append(waiting["reason"])
            message = waiting.get("message", "")
        if "ErrImagePull" in reasons and "ImagePullBackOff" in reasons[reasons.index("ErrImagePull") :]:
            stream.stop()
    assert reasons[reasons.index("ErrImagePull") + 1] == "ImagePullBackOff", reasons
    assert "nginx:1.27" in message
    pod = get_pod(kube_api, namespace, "nginx")
    assert pod["status"]["phase"] == "Pending"


def test_node_selector_and_pod_anti_affinity(substrate, kube_api, namespace):
    nodes = our_nodes(kube_api)
    assert len(nodes) >= 2
    create_pod(
        kube_api,
        namespace,
        pod_manifest("pinned", [container("c", "exec sleep 3600")], nodeSelector={"kubernetes.io/hostname": nodes[-1]}),
    )
    create_pod(
        kube_api,
        namespace,
        pod_manifest("nowhere", [container("c", "exec sleep 3600")], nodeSelector={"disktype": "ssd"}),
    )
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "spread"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    for i in range(len(nodes) + 1):
        create_pod(
            kube_api,
            namespace,
            pod_manifest(f"spread-{i}", [container("c", "exec sleep 3600")], labels={"app": "spread"}, affinity=anti),
        )

    assert wait_ready(kube_api, namespace, "pinned")["spec"]["nodeName"] == nodes[-1]

    def unschedulable(name):
        def check():
            pod = get_pod(kube_api, namespace, name)
            cond = next((c for c in pod["status"].get("conditions") or [] if c["type"] == "PodScheduled"), None)
            return cond if cond and cond["status"] == "False" else None

        return check

    cond = wait_until(unschedulable("nowhere"), 15, what="nowhere to be Unschedulable")
    assert cond["reason"] == "Unschedulable" and "node affinity/selector" in cond["message"]

    placed = [wait_ready(kube_api, namespace, f"spread-{i}")["spec"]["nodeName"] for i in range(len(nodes))]
    assert sorted(placed) == nodes, "one anti-affine pod per node"
    cond = wait_until(unschedulable(f"spread-{len(nodes)}"), 15, what="the extra anti-affine pod to be Unschedulable")
    assert "anti-affinity" in cond["message"]


# --- faults ----------------------------------------------------------------------------


def process_state(pid: int) -> str:
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]


def test_freeze_and_thaw_a_container(substrate, kube_api, namespace):
    create_pod(
        kube_api,
        namespace,
        pod_manifest(
            "web",
            [
                container(
                    "http",
                    "exec python -m http.server 8080 --bind $POD_IP",
                    image=OPERATOR_IMAGE,
                    env=POD_IP_ENV,
                    readinessProbe={
                        "httpGet": {"path": "/", "port": 8080},
                        "periodSeconds": 1,
                        "timeoutSeconds": 1,
                        "failureThreshold": 1,
                    },
                )
            ],
        ),
    )
    wait_ready(kube_api, namespace, "web")
    pid = faults.freeze_container(namespace, "web", where=substrate)
    wait_until(lambda: process_state(pid) == "T", 5, what="the process to stop")
    wait_until(
        lambda: condition(get_pod(kube_api, namespace, "web"), "Ready") == "False",
        15,
        what="the frozen container to turn unready",
    )
    assert faults.thaw_container(namespace, "web", where=substrate) == pid
    pod = wait_ready(kube_api, namespace, "web")
    assert container_status(pod, "http")["restartCount"] == 0 and process_state(pid) != "T"
    assert faults.container_pid(namespace, "web", "http", where=substrate) == pid


def node_ready(kube_api, name: str) -> str | None:
    node = core(kube_api).read_node(name)
    return next((c.status for c in node.status.conditions or [] if c.type == "Ready"), None)


def test_node_loss_and_return(substrate, kube_api, namespace):
    node = our_nodes(kube_api)[-1]
    create_pod(
        kube_api,
        namespace,
        pod_manifest("victim", [container("c", "exec sleep 3600")], nodeSelector={"kubernetes.io/hostname": node}),
    )
    wait_ready(kube_api, namespace, "victim")
    pid = faults.container_pid(namespace, "victim", "c", where=substrate)
    try:
        assert f"{namespace}/victim" in faults.lose_node(node, where=substrate)
        wait_until(lambda: not processes.alive(pid), 5, what="the pod's process to die with the node")
        wait_until(
            lambda: node_ready(kube_api, node) != "True",
            45,
            interval=1,
            what=f"{node} to go NotReady (node-monitor-grace-period 20s)",
        )
        lease = client.CoordinationV1Api(kube_api).read_namespaced_lease(node, "kube-node-lease")
        assert time.time() - lease.spec.renew_time.timestamp() > 15
        wait_until(
            lambda: condition(get_pod(kube_api, namespace, "victim"), "Ready") == "False",
            15,
            what="the node lifecycle controller to mark the pod unready",
        )
    finally:
        faults.restore_node(node, where=substrate)
    wait_until(lambda: node_ready(kube_api, node) == "True", 20, what=f"{node} Ready again")
    pod = wait_ready(kube_api, namespace, "victim")
    assert container_status(pod, "c")["restartCount"] >= 1
    assert pod["spec"]["nodeName"] == node


def test_disk_loss_while_running_and_while_stopped(substrate, kube_api, namespace):
    api = core(kube_api)
    api.create_namespaced_persistent_volume_claim(namespace, claim("data"))
    volumes = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]

    def holder(name):
        return pod_manifest(
            name,
            [
                container(
                    "c",
                    "if [ -f /data/marker ]; then echo found; else echo missing; fi; "
                    "touch /data/marker; exec sleep 3600",
                    volumeMounts=[mount("data", "/data")],
                    readinessProbe=exec_probe("test -f /data/marker"),
                )
            ],
            volumes=volumes,
        )

    create_pod(kube_api, namespace, holder("first"))
    wait_ready(kube_api, namespace, "first")
    wiped = faults.lose_disk(namespace, "data", where=substrate)
    assert os.listdir(wiped) == []
    wait_until(
        lambda: condition(get_pod(kube_api, namespace, "first"), "Ready") == "False",
        10,
        what="the running container to see the wiped disk",
    )

    api.delete_namespaced_pod("first", namespace)
    wait_gone(kube_api, namespace, "first")
    create_pod(kube_api, namespace, holder("second"))
    wait_ready(kube_api, namespace, "second")
    api.delete_namespaced_pod("second", namespace)
    wait_gone(kube_api, namespace, "second")
    faults.lose_disk(namespace, "data", where=substrate)  # nothing runs now
    create_pod(kube_api, namespace, holder("third"))
    wait_ready(kube_api, namespace, "third")
    assert [log_of(substrate, namespace, p, "c").strip() for p in ("first", "second", "third")] == [
        "missing",
        "missing",
        "missing",
    ]


def test_evict_stops_the_pod_for_good_and_keeps_its_volume(substrate, kube_api, namespace):
    api = core(kube_api)
    api.create_namespaced_persistent_volume_claim(namespace, claim("data"))
    create_pod(
        kube_api,
        namespace,
        pod_manifest(
            "evictee",
            [
                container(
                    "polite",
                    "trap 'echo got TERM; exit 0' TERM; echo kept > /data/file; while true; do sleep 0.2; done",
                    volumeMounts=[mount("data", "/data")],
                ),
                container("stubborn", "trap 'echo ignoring TERM' TERM; while true; do sleep 0.2; done"),
            ],
            terminationGracePeriodSeconds=2,
            volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        ),
    )
    uid = wait_ready(kube_api, namespace, "evictee")["metadata"]["uid"]
    pids = [faults.container_pid(namespace, "evictee", c, where=substrate) for c in ("polite", "stubborn")]
    directory = api.read_persistent_volume(
        api.read_namespaced_persistent_volume_claim("data", namespace).spec.volume_name
    ).spec.host_path.path
    wait_until(lambda: os.path.exists(os.path.join(directory, "file")), 10, what="the file on the claim")

    assert faults.evict(namespace, "evictee", where=substrate)["uid"] == uid
    pod = wait_phase(kube_api, namespace, "evictee", "Failed", timeout=20)
    assert pod["status"]["reason"] == "Evicted" and "low on resource" in pod["status"]["message"]
    assert condition(pod, "DisruptionTarget") == "True" and condition(pod, "Ready") == "False"
    polite, stubborn = container_status(pod, "polite"), container_status(pod, "stubborn")
    assert polite["state"].get("terminated", {}).get("exitCode") == 0, polite
    assert stubborn["state"].get("terminated", {}).get("exitCode") == 137, stubborn  # SIGKILL after the grace
    assert "got TERM" in log_of(substrate, namespace, "evictee", "polite")
    assert "ignoring TERM" in log_of(substrate, namespace, "evictee", "stubborn")
    assert not any(processes.alive(pid) for pid in pids)
    with pytest.raises(faults.FaultFailed, match="409"):
        faults.evict(namespace, "evictee", where=substrate)

    # restartPolicy Always notwithstanding, nothing starts again (back-off base is 1 s).
    def still_stopped() -> None:
        pod = get_pod(kube_api, namespace, "evictee")
        assert pod["metadata"]["uid"] == uid and pod["status"]["phase"] == "Failed"
        assert all(s["restartCount"] == 0 and "terminated" in s["state"] for s in pod["status"]["containerStatuses"])
        assert all(
            c["pid"] is None for c in faults.pod_info(namespace, "evictee", where=substrate)["containers"].values()
        )

    holds_throughout(still_stopped, 5, interval=0.5, what="the evicted pod stays stopped")
    events = api.list_namespaced_event(namespace, field_selector="involvedObject.name=evictee").items
    assert any(e.reason == "Evicted" and e.type == "Warning" for e in events)

    api.delete_namespaced_pod("evictee", namespace)
    wait_gone(kube_api, namespace, "evictee", timeout=10)
    assert api.read_namespaced_persistent_volume_claim("data", namespace).status.phase == "Bound"
    assert open(os.path.join(directory, "file")).read() == "kept\n"


def test_service_account_credentials_with_rbac(substrate, kube_api, namespace):
    api, rbac = core(kube_api), client.RbacAuthorizationV1Api(kube_api)
    api.create_namespaced_service_account(namespace, {"metadata": {"name": "reader"}})
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        },
    )
    in_cluster = (
        "import os\n"
        "from kubernetes import client, config\n"
        "config.load_incluster_config()\n"
        "api = client.CoreV1Api()\n"
        f"print('pods', len(api.list_namespaced_pod('{namespace}').items))\n"
        "try:\n"
        f"    api.list_namespaced_secret('{namespace}')\n"
        "    print('secrets allowed')\n"
        "except client.ApiException as e:\n"
        "    print('secrets', e.status)\n"
        "print('env', os.environ['KUBERNETES_SERVICE_HOST'], os.environ['KUBERNETES_SERVICE_PORT'])\n"
    )
    create_pod(
        kube_api,
        namespace,
        pod_manifest(
            "operator",
            [container("op", image=OPERATOR_IMAGE, command=["python", "-c", in_cluster])],
            serviceAccountName="reader",
            restartPolicy="Never",
        ),
    )
    create_pod(
        kube_api,
        namespace,
        pod_manifest(
            "shell",
            [
                container(
                    "c",
                    "cat /var/run/secrets/kubernetes.io/serviceaccount/token; echo; "
                    "cat /var/run/secrets/kubernetes.io/serviceaccount/namespace; echo",
                )
            ],
            serviceAccountName="reader",
            restartPolicy="Never",
        ),
    )

    wait_phase(kube_api, namespace, "operator", "Succeeded", timeout=40)
    out = log_of(substrate, namespace, "operator", "op").splitlines()
    assert "secrets 403" in out and any(line.startswith("pods ") for line in out), out
    assert f"env 127.0.0.1 {substrate.ports.apiserver}" in out

    wait_phase(kube_api, namespace, "shell", "Succeeded")
    token, ns_file = log_of(substrate, namespace, "shell", "c").split()[:2]
    assert ns_file == namespace
    review = client.AuthenticationV1Api(kube_api).create_token_review({"spec": {"token": token}})
    assert review.status.authenticated
    assert review.status.user.username == f"system:serviceaccount:{namespace}:reader"

    configuration = client.Configuration()
    configuration.host = f"https://127.0.0.1:{substrate.ports.apiserver}"
    configuration.ssl_ca_cert = str(substrate.pki_dir / "ca.crt")
    configuration.api_key = {"authorization": f"Bearer {token}"}
    as_reader = client.CoreV1Api(client.ApiClient(configuration))
    assert {p.metadata.name for p in as_reader.list_namespaced_pod(namespace).items} >= {"operator", "shell"}
    with pytest.raises(client.ApiException) as denied:
        as_reader.list_namespaced_secret(namespace)
    assert denied.value.status == 403


def agent_healthy(where) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{where.ports.node_agent}/healthz", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def test_agent_restart_adopts_running_containers(substrate, kube_api, namespace):
    create_pod(kube_api, namespace, pod_manifest("steady", [container("c", "exec sleep 3600")]))
    wait_ready(kube_api, namespace, "steady")
    pid = faults.container_pid(namespace, "steady", "c", where=substrate)

    agent_pid = processes.read_pid(substrate.run_dir, "node-agent")
    os.kill(agent_pid, signal.SIGKILL)
    wait_until(lambda: not processes.alive(agent_pid), 10, what="the agent to die")
    assert processes.alive(pid), "container processes outlive the agent"
    try:
        controlplane.up(substrate, only={"node-agent"})
    except processes.PortTaken:
        pass  # another session sharing the substrate restarted the agent first
    wait_until(lambda: agent_healthy(substrate), 60, what="a new agent to be healthy")

    assert faults.container_pid(namespace, "steady", "c", where=substrate) == pid
    pod = wait_ready(kube_api, namespace, "steady")
    assert container_status(pod, "c")["restartCount"] == 0
    pid_files = [p for p in (substrate.run_dir / "pods").glob("*.pid") if p.read_text().strip() == str(pid)]
    assert len(pid_files) == 1
    # the adopted process is fully managed again: a crash restarts it
    faults.crash_container(namespace, "steady", where=substrate)

    def restarted():
        pod = get_pod(kube_api, namespace, "steady")
        return container_status(pod, "c").get("restartCount") == 1 and condition(pod, "Ready") == "True"

    wait_until(restarted, 20, what="the adopted container to restart after a crash")
