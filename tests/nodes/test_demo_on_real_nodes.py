"""`make demo`: e2e/demo.sh on real nodes installs the operator with the chart (pods from the
image built here), and the demo passes: a 3-member TLS cluster, its first backup in MinIO, a key
written and read back with etcdctl on the host by the client Service's name. Run again, it
changes nothing. Here the script runs against the session's real nodes (the same
`up` as `make up`, in the tests' own instance)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import time

import pytest

from localkube import hoststate
from tests.support import chart_release, measured, real_nodes_fixtures
from tests.support.clusters import member_pods
from tests.support.helm import CHART, helm
from tests.support.kubectl import kubectl, kubectl_json

pytestmark = [
    pytest.mark.needs_nodes,
    pytest.mark.needs_release,
    pytest.mark.needs_store,
    pytest.mark.sets_the_operator_aside,
    pytest.mark.usefixtures("kubectl_on_real_nodes"),
]
ROOT = pathlib.Path(__file__).resolve().parents[2]
# Not `demo`, so that its names never meet those of a user's own demo on this host.
DEMO_NAMESPACE = "demo-on-real-nodes"


def run_demo(real_nodes) -> subprocess.CompletedProcess:
    env = {**os.environ, "LOCALKUBE_STATE_DIR": str(real_nodes.state_dir), "DEMO_NAMESPACE": DEMO_NAMESPACE}
    return subprocess.run(
        [str(ROOT / "e2e" / "demo.sh")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )


def test_the_demo_installs_the_operator_with_the_chart_and_passes(real_nodes):
    if hoststate.RESOLVER_MARKER + real_nodes.checkout_id not in hoststate.RESOLV_CONF.read_text():
        pytest.skip(
            "/etc/resolv.conf belongs to another checkout's real nodes: the demo's etcdctl cannot "
            "resolve the client Service from the host"
        )
    # The demo installs the release `etcd-operator` itself, watching only its namespace: the
    # session's release, if there, is set aside until a later test needs it.
    real_nodes_fixtures.set_the_release_aside(real_nodes.kubeconfig)
    try:
        started = time.monotonic()
        first = run_demo(real_nodes)
        measured.report(
            f"the demo (e2e/demo.sh, the chart installed first) on real nodes: {time.monotonic() - started:.0f}s"
        )
        assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
        assert "operator installed by the chart" in first.stdout, first.stdout
        assert "operator started" not in first.stdout, "the demo started a host process on real nodes"
        pods = kubectl_json("get", "pods", "-n", chart_release.NAMESPACE, "-l", f"app.kubernetes.io/name={CHART.name}")[
            "items"
        ]
        assert len(pods) == 2 and all(p["spec"]["nodeName"].startswith("node-") for p in pods)
        assert len(member_pods(DEMO_NAMESPACE, "demo")) == 3

        again = run_demo(real_nodes)
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
        assert "operator installed" not in again.stdout
        applied = [
            line for line in again.stdout.splitlines() if line.endswith((" unchanged", " configured", " created"))
        ]
        assert applied and all(line.endswith(" unchanged") for line in applied), applied
    finally:
        # The demo's operator releases its cluster before it goes.
        kubectl("delete", "namespace", DEMO_NAMESPACE, "--ignore-not-found", "--timeout=180s", check=False)
        helm("uninstall", chart_release.RELEASE, "-n", chart_release.NAMESPACE, "--wait", check=False)
        chart_release.delete_namespace(chart_release.NAMESPACE)
