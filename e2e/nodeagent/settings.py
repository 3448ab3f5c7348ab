"""The agent's configuration, from the environment `localkube up` gives it."""

from __future__ import annotations

import dataclasses
import os
import pathlib

from localkube import layout as localkube_layout
from nodeagent.paths import Paths


@dataclasses.dataclass(frozen=True)
class Settings:
    layout: localkube_layout.Layout
    kubeconfig: pathlib.Path
    node_count: int
    backoff_base: float
    hosts_file: pathlib.Path

    @property
    def paths(self) -> Paths:
        return Paths(self.layout.state_dir)

    @property
    def backoff_cap(self) -> float:
        # kubelet: 10 s doubling to 300 s, i.e. 30 times the base
        return 30 * self.backoff_base

    @property
    def agent_port(self) -> int:
        return self.layout.ports.node_agent

    @property
    def apiserver_port(self) -> int:
        return self.layout.ports.apiserver


def from_environment() -> Settings:
    layout = localkube_layout.current()  # the instance LOCALKUBE_STATE_DIR names
    return Settings(
        layout=layout,
        kubeconfig=pathlib.Path(os.environ.get("KUBECONFIG", layout.state_dir / "node-agent.kubeconfig")),
        node_count=max(1, int(os.environ.get("LOCALKUBE_NODES", "3"))),
        backoff_base=float(os.environ.get("LOCALKUBE_BACKOFF_BASE", "1")),
        hosts_file=pathlib.Path(os.environ.get("LOCALKUBE_HOSTS_FILE", "/etc/hosts")),
    )
