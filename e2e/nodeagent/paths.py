"""Where the agent keeps things on disk; shared with tests, which read logs and volumes."""

from __future__ import annotations

import pathlib


class Paths:
    def __init__(self, state_dir: pathlib.Path):
        self.state_dir = pathlib.Path(state_dir)
        self.root = self.state_dir / "nodeagent"

    # one directory per pod (by uid): volumes, working directories, exit codes
    def pod_dir(self, uid: str) -> pathlib.Path:
        return self.root / "pods" / uid

    def volume_dir(self, uid: str, volume: str) -> pathlib.Path:
        return self.pod_dir(uid) / "volumes" / volume

    def work_dir(self, uid: str, container: str) -> pathlib.Path:
        return self.pod_dir(uid) / "work" / container

    def exit_file(self, uid: str, container: str) -> pathlib.Path:
        return self.pod_dir(uid) / "exit" / container

    # provisioned persistent volumes, by PV name
    def pv_dir(self, pv_name: str) -> pathlib.Path:
        return self.root / "volumes" / pv_name

    def log_file(self, namespace: str, pod: str, container: str) -> pathlib.Path:
        return self.state_dir / "pods" / namespace / pod / f"{container}.log"

    # pid files of running container processes (`localkube down` kills these too)
    @property
    def records_dir(self) -> pathlib.Path:
        return self.state_dir / "run" / "pods"

    @property
    def ipam_file(self) -> pathlib.Path:
        return self.root / "ipam.json"
