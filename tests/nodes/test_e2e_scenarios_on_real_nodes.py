"""External mode, as `make e2e-kind` uses it on kind, proven on the real nodes: a separate
pytest process that starts nothing runs one e2e scenario and finds KUBECONFIG, the operator
the chart installed (operator_release) and S3 (the substrate's MinIO, which pods on the real
nodes reach on the bridge's host address) in its environment: the scenario that backs up to S3
and restores from it, so that each of the three is used. `make test` runs every scenario
directly (e2e/scenarios is in pytest's testpaths)."""

from __future__ import annotations

import os
import pathlib
import subprocess

import pytest

from localkube import controlplane
from tests.support import chart_release, doc_commands

pytestmark = [pytest.mark.needs_nodes, pytest.mark.needs_release, pytest.mark.needs_store]
ROOT = pathlib.Path(__file__).resolve().parents[2]
ONE_SCENARIO = "test_scheduled_backup_then_restore_into_a_new_cluster_then_delete_everything"


def test_e2e_scenarios_pass_in_external_mode(real_nodes, operator_release):
    s3 = controlplane.s3_environment(real_nodes)
    env = {
        **os.environ,
        "E2E_TARGET": "external",
        "KUBECONFIG": str(real_nodes.kubeconfig),
        "E2E_OPERATOR_NAMESPACE": chart_release.NAMESPACE,
        "E2E_S3_ENDPOINT": s3["S3_ENDPOINT"],
        "E2E_S3_BUCKET": s3["S3_BUCKET"],
        "E2E_S3_ACCESS_KEY": s3["AWS_ACCESS_KEY_ID"],
        "E2E_S3_SECRET_KEY": s3["AWS_SECRET_ACCESS_KEY"],
        "E2E_S3_REGION": s3["S3_REGION"],
    }
    # docs/development.md's command, with this substrate's values for the variables it names.
    printed, argv = doc_commands.command("docs/development.md", "E2E_TARGET=external")
    assert set(printed) <= set(env), f"docs/development.md names {sorted(set(printed) - set(env))}, not set here"
    result = subprocess.run(
        [*argv, "-q", "-p", "no:cacheprovider", "-k", ONE_SCENARIO],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    failures = result.stdout.find("= FAILURES =")
    assert result.returncode == 0, (
        (result.stdout[failures : failures + 5000] if failures >= 0 else "")
        + result.stdout[-1500:]
        + result.stderr[-2000:]
    )
    assert "1 passed" in result.stdout and "skipped" not in result.stdout, result.stdout[-2000:]
    # The scenario's time, from the inner run's --durations.
    print(result.stdout[result.stdout.find("slowest") :] if "slowest" in result.stdout else result.stdout[-1500:])
