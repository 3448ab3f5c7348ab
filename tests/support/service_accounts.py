"""A kubeconfig that authenticates to the real nodes' API server as a ServiceAccount, by a token
the API server issues for it: how tests run something with exactly the rights a Role grants."""

from __future__ import annotations

import json
import pathlib

from localkube import controlplane
from tests.support.kubectl import kubectl


def token_kubeconfig(
    real_nodes, namespace: str, account: str, path: pathlib.Path, context_namespace: str | None = None
) -> pathlib.Path:
    """Writes, at `path`, a kubeconfig whose one context is the ServiceAccount `account` of
    `namespace` (with `context_namespace` as its default namespace, when given)."""
    token = kubectl("create", "token", account, "-n", namespace, "--duration=1h").stdout.strip()
    context = {"cluster": "local", "user": account}
    if context_namespace:
        context["namespace"] = context_namespace
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "sa",
        "clusters": [
            {
                "name": "local",
                "cluster": {
                    "server": controlplane.apiserver_url(real_nodes),
                    "certificate-authority": str(real_nodes.pki_dir / "ca.crt"),
                },
            }
        ],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": context}],
    }
    path.write_text(json.dumps(config))
    return path
