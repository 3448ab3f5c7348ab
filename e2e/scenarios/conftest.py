"""The portable scenarios: where they run, e2e/target.py."""

from __future__ import annotations

from target import (  # noqa: F401  (fixtures and the hook that registers the real nodes' fixtures)
    e2e_kubeconfig,
    e2e_nodes,
    explain_failure,
    kube_api,
    operator_namespace,
    pytest_configure,
    s3_settings,
)
