"""The tests' real-node instance, shared by the pytest runs of `make test` that use it at once
(the chart's tests, and the operator processes beside the node agent's tests), with file locks
in its root:

- `up.lock`, held while one run brings the instance up; the run that finds it down records the
  host first (`host-before.json`), so that the check of `down` compares with the host as found
  whichever run came first;
- `users.lock`, held shared by every run while it uses the instance. A run takes the instance
  down when it is done only if it brought it up and no other run holds it; the check of `down`
  waits until it is the only user.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import pathlib
import time
from typing import Iterator

from localkube import controlplane, hoststate, layout as localkube_layout
from localkube.layout import Layout
from tests.support import measured


def _host_before_file(root: pathlib.Path) -> pathlib.Path:
    return root / "host-before.json"


@contextlib.contextmanager
def _locked(path: pathlib.Path, mode: int) -> Iterator[None]:
    with open(path, "a") as file:
        fcntl.flock(file, mode)
        try:
            yield
        finally:
            fcntl.flock(file, fcntl.LOCK_UN)


class SharedUse:
    """One run's use of the instance, from `start()` to `end()`."""

    def __init__(self, root: pathlib.Path, where: Layout):
        self.root, self.where = root, where
        self.started_here = False
        self._users = None

    def start(self) -> "SharedUse":
        self.root.mkdir(parents=True, exist_ok=True)
        self._users = open(self.root / "users.lock", "a")
        fcntl.flock(self._users, fcntl.LOCK_SH)  # waits while a check of `down` runs
        with _locked(self.root / "up.lock", fcntl.LOCK_EX):
            if not controlplane.apiserver_ready(self.where):
                self.started_here = True
                _host_before_file(self.root).write_text(json.dumps(hoststate.snapshot()))
            controlplane.up(self.where, nodes="real")
        return self

    def host_before(self) -> dict:
        """The host as the run that brought the instance up found it."""
        return json.loads(_host_before_file(self.root).read_text())

    def wait_until_only_user(self) -> None:
        """Blocks until every other run let go of the instance."""
        fcntl.flock(self._users, fcntl.LOCK_EX)

    def end(self) -> None:
        """Lets go; takes the instance down if this run brought it up and is its last user."""
        try:
            if self.started_here and controlplane.apiserver_ready(self.where):
                try:
                    fcntl.flock(self._users, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return  # another run still uses it, and takes it down after the check
                controlplane.down(self.where)
        finally:
            self._users.close()


@contextlib.contextmanager
def used(root: pathlib.Path) -> Iterator[SharedUse]:
    """The instance in `root`, up (brought up here, or joined) for as long as the block runs."""
    started = time.monotonic()
    use = SharedUse(root, localkube_layout.current(root)).start()
    how = "up" if use.started_here else "joined"
    measured.report(f"real nodes: control plane and three Ready nodes {how} in {time.monotonic() - started:.1f}s")
    try:
        yield use
    finally:
        use.end()
