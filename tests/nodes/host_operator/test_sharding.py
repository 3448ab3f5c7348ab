"""Two operator instances split the clusters of one namespace by label (SHARD_SELECTOR), each
behind its own Lease: each reconciles its own cluster to health and never touches the other's,
neither with a write of its own nor through kopf's finalizer. A cluster relabelled out of its
shard stops being worked on but stays held (its finalizer) until another shard asks for it;
then the old shard lets go, and only then does the new one take it. On the shared real nodes
the session's chart release, which is no shard and takes whatever no instance holds, is fenced
out of the test's namespace (`chart_release.fenced_out`)."""

from __future__ import annotations

import json
import threading
import urllib.request

import pytest

from etcd_operator.core.shard import HANDOVER_ANNOTATION, shard_from_settings
from tests.support import chart_release
from tests.support.clusters import PLAINTEXT, wait_healthy
from tests.support.kubectl import kubectl, kubectl_json
from tests.support.operator_process import OperatorProcess
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.needs_nodes, pytest.mark.needs_operator_process]

WRITE_TRACE = "etcd_operator.writes sending"  # LOG_WRITES=true: one line per write let through
SHARDS = {"a": "shard=a", "b": "shard in (b),tier!=test"}
CLUSTERS = {"a": "alpha", "b": "bravo"}  # the cluster each shard's selector takes
RELEASED = "===== test: shard a stopped working on alpha ====="
FINALIZERS = {shard: shard_from_settings(shard, "").finalizer for shard in SHARDS}


class FinalizerRecorder:
    """Every finalizer list each EtcdCluster of the namespace had, from a watch (a list every
    so often could miss a finalizer removed and put back in between)."""

    def __init__(self, kube_api, namespace: str):
        from kubernetes import client, watch

        self.custom = client.CustomObjectsApi(kube_api)
        self.watch = watch.Watch()
        self.namespace = namespace
        self.history: dict[str, list[tuple[str, ...]]] = {}
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> FinalizerRecorder:
        self._thread.start()
        return self

    def _run(self) -> None:
        version = ""
        try:
            while not self._stop.is_set():
                for event in self.watch.stream(
                    self.custom.list_namespaced_custom_object,
                    "etcd.operator.dev",
                    "v1alpha1",
                    self.namespace,
                    "etcdclusters",
                    resource_version=version,
                    timeout_seconds=2,
                ):
                    meta = event["object"]["metadata"]
                    version = meta["resourceVersion"]
                    self.history.setdefault(meta["name"], []).append(tuple(meta.get("finalizers") or ()))
        except BaseException as e:  # judged by the test: a recorder that died proves nothing
            self.error = e

    def stop(self) -> None:
        self._stop.set()
        self.watch.stop()
        self._thread.join(10)

    def finalizers_ever(self, name: str) -> set[str]:
        return {f for finalizers in self.history.get(name, []) for f in finalizers}

    def lost_after_set(self, name: str, finalizer: str) -> bool:
        """Whether the finalizer was ever removed again once set (while not being deleted)."""
        states = [finalizer in finalizers for finalizers in self.history.get(name, [])]
        return states[states.index(True) :].count(False) > 0 if True in states else False


def shard_operator(real_nodes, namespace: str, shard: str) -> OperatorProcess:
    env = {
        "LEADER_ELECTION": "true",
        "POD_NAMESPACE": namespace,
        "LOG_WRITES": "true",
        "SHARD_NAME": shard,
        "SHARD_SELECTOR": SHARDS[shard],
    }
    return OperatorProcess(
        real_nodes, namespace, identity=f"shard-{shard}", env=env, resolver=real_nodes.node_network.dns_address
    )


def lease_holder(namespace: str, shard: str) -> str:
    lease = kubectl_json("get", "lease", shard_from_settings(shard, "").lease_name, "-n", namespace)
    return (lease.get("spec") or {}).get("holderIdentity") or ""


def apply_labelled_cluster(namespace: str, name: str, labels: dict[str, str]) -> None:
    manifest = {
        "apiVersion": "etcd.operator.dev/v1alpha1",
        "kind": "EtcdCluster",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {**PLAINTEXT, "size": 1, "storage": {"size": "1Gi"}},
    }
    kubectl("apply", "-f", "-", input=json.dumps(manifest))


def alpha_meta(namespace: str) -> dict:
    return kubectl_json("get", "etcdcluster", "alpha", "-n", namespace)["metadata"]


def metrics_clusters(operator: OperatorProcess) -> set[str]:
    """The clusters this instance exports series for: those it has a daemon for."""
    with urllib.request.urlopen(f"http://127.0.0.1:{operator.health_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        line.split('cluster="', 1)[1].split('"', 1)[0]
        for line in text.splitlines()
        if line.startswith("etcd_operator_cluster_desired_members{") and 'cluster="' in line
    }


def writes_naming(log: str, name: str) -> list[str]:
    return [line for line in log.splitlines() if WRITE_TRACE in line and f"/{name}" in line]


@pytest.fixture
def fenced_namespace(namespace):
    with chart_release.fenced_out(namespace):
        yield namespace


def test_two_shards_never_touch_each_others_clusters(real_nodes, fenced_namespace, kube_api):
    namespace = fenced_namespace
    operators = {shard: shard_operator(real_nodes, namespace, shard) for shard in SHARDS}
    recorder = FinalizerRecorder(kube_api, namespace).start()
    try:
        for operator in operators.values():
            operator.start()
        for shard in SHARDS:
            wait_for(
                lambda shard=shard: lease_holder(namespace, shard).startswith(f"shard-{shard}_"),
                30,
                what=f"shard {shard} holds its own lease",
            )

        apply_labelled_cluster(namespace, "alpha", {"shard": "a"})
        apply_labelled_cluster(namespace, "bravo", {"shard": "b", "tier": "prod"})
        for name in CLUSTERS.values():
            wait_healthy(namespace, name, 1, timeout=120)
        for shard, name in CLUSTERS.items():
            wait_for(
                lambda shard=shard, name=name: name in metrics_clusters(operators[shard]),
                30,
                what=f"shard {shard} works on {name}",
            )

        # Each shard wrote to its own cluster, never a byte to the other's.
        for shard, name in CLUSTERS.items():
            log = operators[shard].log_text()
            other = CLUSTERS["b" if shard == "a" else "a"]
            assert writes_naming(log, name), f"shard {shard} wrote nothing to {name}: the trace proves nothing"
            assert not writes_naming(log, other), f"shard {shard} wrote to {other}:\n" + "\n".join(
                writes_naming(log, other)
            )
            assert metrics_clusters(operators[shard]) == {name}  # no daemon for the other cluster
        # ... nor through kopf: each cluster only ever carried its own shard's finalizer, and kept it.
        assert recorder.error is None, recorder.error
        for shard, name in CLUSTERS.items():
            finalizer = FINALIZERS[shard]
            assert recorder.finalizers_ever(name) == {finalizer}, recorder.history[name]
            assert not recorder.lost_after_set(name, finalizer), (
                f"{name} lost {finalizer} while not being deleted: {recorder.history[name]}"
            )

        # Relabelled to no shard, alpha is no longer worked on, but shard a keeps holding it
        # (its finalizer), so a deletion would still apply reclaimPolicy.
        kubectl("label", "etcdcluster", "alpha", "-n", namespace, "shard=nobody", "--overwrite")
        wait_for(
            lambda: "alpha" not in metrics_clusters(operators["a"]),
            60,
            interval=0.2,
            what="shard a's daemon for alpha stopped",
        )
        operators["a"].mark_log(RELEASED)
        assert alpha_meta(namespace).get("finalizers") == [FINALIZERS["a"]]

        # Hand-over to shard b: b asks; while a is frozen it cannot let go, so b leaves alpha
        # alone; once a lets go (its finalizer goes), b takes alpha.
        operators["a"].freeze()
        try:
            kubectl("label", "etcdcluster", "alpha", "-n", namespace, "shard=b", "--overwrite")
            wait_for(
                lambda: (
                    alpha_meta(namespace).get("annotations", {}).get(HANDOVER_ANNOTATION) == "b"
                    or alpha_meta(namespace).get("finalizers") != [FINALIZERS["a"]]
                ),
                30,
                interval=0.2,
                what="shard b asks for alpha",
            )
            assert alpha_meta(namespace).get("finalizers") == [FINALIZERS["a"]]
            assert metrics_clusters(operators["b"]) == {"bravo"}
        finally:
            operators["a"].resume()
        wait_for(
            lambda: alpha_meta(namespace).get("finalizers") == [FINALIZERS["b"]],
            30,
            interval=0.2,
            what="alpha held by shard b alone",
        )
        wait_for(
            lambda: metrics_clusters(operators["b"]) == {"alpha", "bravo"},
            30,
            interval=0.2,
            what="shard b works on alpha",
        )
        wait_healthy(namespace, "alpha", 1, timeout=60)
        after_release = operators["a"].log_text().rsplit(RELEASED, 1)[1]
        assert not writes_naming(after_release, "alpha"), after_release
        assert recorder.error is None, recorder.error
        assert not any(len(f) > 1 for f in recorder.history["alpha"]), (
            f"alpha was held by both shards at once: {recorder.history['alpha']}"
        )
        assert recorder.finalizers_ever("bravo") == {FINALIZERS["b"]}, recorder.history["bravo"]
        assert not recorder.lost_after_set("bravo", FINALIZERS["b"]), recorder.history["bravo"]
        bravo_writes_of_a = writes_naming(operators["a"].log_text(), "bravo")
        assert not bravo_writes_of_a, "\n".join(bravo_writes_of_a)
        for shard, operator in operators.items():
            assert operator.exited() is None, f"shard {shard} exited:\n{operator.log_text()[-4000:]}"
    except BaseException:
        for operator in operators.values():
            if operator.log_path.exists():
                print(f"----- tail of {operator.log_path} -----\n{operator.log_text()[-8000:]}")
        raise
    finally:
        recorder.stop()
        for operator in operators.values():
            operator.stop()


def test_an_invalid_shard_setting_stops_the_operator_at_start_up(real_nodes, namespace):
    operator = OperatorProcess(
        real_nodes, namespace, identity="bad-selector", env={"SHARD_NAME": "a", "SHARD_SELECTOR": "shard in (a"}
    )
    operator.start()
    assert operator.wait_exit(30) == 2
    assert "selector 'shard in (a': '(' without ')'" in operator.log_text()
