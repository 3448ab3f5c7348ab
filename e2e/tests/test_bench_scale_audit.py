"""The substrate's opt-in audit log (LOCALKUBE_AUDIT), which the scale benchmark reads:
off by default, Metadata level when on, and a running kube-apiserver without it is outdated."""

from __future__ import annotations

import json
import os
import pathlib

from localkube import controlplane, layout


def substrate(root: pathlib.Path) -> layout.Layout:
    where = layout.Layout(
        root=root, checkout_id="t", ports=layout.Ports.from_base(20000), pod_subnet_octet=9, testbin=root / "testbin"
    )
    where.state_dir.mkdir(parents=True)
    where.logs_dir.mkdir(parents=True)
    return where


def test_off_by_default_so_tests_pay_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv(controlplane.AUDIT_ENV, raising=False)
    argv = controlplane._apiserver_argv(substrate(tmp_path))
    assert not [arg for arg in argv if arg.startswith("--audit")]
    assert not controlplane._lacks_wanted_audit(substrate(tmp_path / "b"), os.getpid())


def test_on_writes_a_metadata_policy_and_logs_json(tmp_path, monkeypatch):
    monkeypatch.setenv(controlplane.AUDIT_ENV, "1")
    where = substrate(tmp_path)
    argv = controlplane._apiserver_argv(where)
    assert f"--audit-log-path={controlplane.audit_log_path(where)}" in argv
    assert "--audit-log-format=json" in argv
    policy_arg = next(arg for arg in argv if arg.startswith("--audit-policy-file="))
    policy = json.loads(pathlib.Path(policy_arg.split("=", 1)[1]).read_text())
    assert policy["rules"] == [{"level": "Metadata"}]
    assert policy["omitStages"] == ["RequestReceived"]


def test_a_running_apiserver_without_the_wanted_audit_log_is_outdated(tmp_path, monkeypatch):
    monkeypatch.setenv(controlplane.AUDIT_ENV, "1")
    # This test process stands in for a kube-apiserver started without --audit-log-path.
    assert controlplane._lacks_wanted_audit(substrate(tmp_path), os.getpid())
