"""The tests' real-node instance, shared by the pytest runs of `make test` that use it at once
(the chart's tests, and the operator processes on the host), with file locks
in its root:

- `up.lock`, held while one run brings the instance up; the run that finds it down records the
  host first (`host-before.json`), so that the check of `down` compares with the host as found
  whichever run came first; a run that finds it up joins it as it is, faulted nodes and all;
- `users.lock`, held shared by every run while it uses the instance. A run takes the instance
  down when it is done only if no other run holds it;
- `down-check.lock`, held by the run whose check of `down` waits to be the only user (flock
  gives its shared lock up while it waits for the exclusive one, so the others look here
  first): while it is held, no other run takes the instance down;
- `nodes.lock`, held shared while a test works on the nodes (`nodes_kept`) and exclusively by
  a test that stops, partitions, drains or deletes a node (`nodes_to_itself`, or
  `take_the_nodes` to `give_the_nodes_back` over consecutive faulting tests), so that a node
  fault never hits another run's clusters; `nodes-turnstile.lock` lets a waiting node fault
  in before the next test takes its shared lock. A run whose tests fault nodes takes the nodes
  before it joins (its faults run first), so that it never waits for another run's test.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import pathlib
import time
from collections.abc import Iterator

from localkube import controlplane, hoststate
from localkube import layout as localkube_layout
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
        self._down_check = None
        self._kept = 0
        self._exclusive: tuple | None = None  # nodes-turnstile.lock and nodes.lock, held exclusively
        self._exclusive_since = 0.0
        # Seconds this run waited on nodes.lock, and how often (over half a second): for a node
        # fault of another run (shared), to fault a node itself (exclusive); and how long it held
        # the nodes to itself. Reported when the run lets go.
        self.waited_for_faults = self.waited_to_fault = self.held_to_itself = 0.0
        self.waits_for_faults = self.waits_to_fault = 0

    def start(self, faults_first: bool = False) -> SharedUse:
        """Joins the instance (bringing it up if it is down). A run whose first tests fault
        nodes (`faults_first`) takes the nodes before that, so that the other runs' tests
        wait for its faults from the start instead of it waiting for one of theirs in flight."""
        self.root.mkdir(parents=True, exist_ok=True)
        if faults_first:
            self.take_the_nodes()
        self._users = open(self.root / "users.lock", "a")
        fcntl.flock(self._users, fcntl.LOCK_SH)  # waits while a check of `down` runs
        with _locked(self.root / "up.lock", fcntl.LOCK_EX):
            if not controlplane.apiserver_ready(self.where):
                self.started_here = True
                _host_before_file(self.root).write_text(json.dumps(hoststate.snapshot()))
                controlplane.up(self.where)
            # Else it joins as it is: `up` would start a node that another run's test stopped on
            # purpose (CI, once: a deleted node came back and took the replacement member).
        return self

    def up_again(self) -> None:
        """`up` once more, under the lock a run that joins takes for it."""
        with _locked(self.root / "up.lock", fcntl.LOCK_EX):
            controlplane.up(self.where)

    def host_before(self) -> dict:
        """The host as the run that brought the instance up found it."""
        return json.loads(_host_before_file(self.root).read_text())

    @contextlib.contextmanager
    def nodes_kept(self) -> Iterator[None]:
        """While the block runs, no other run faults a node (re-entrant within this run, and
        kept already while this run holds the nodes to itself)."""
        if self._exclusive is not None:
            yield
            return
        if self._kept:
            self._kept += 1
            try:
                yield
            finally:
                self._kept -= 1
            return
        asked = time.monotonic()
        with _locked(self.root / "nodes-turnstile.lock", fcntl.LOCK_SH):
            pass  # waits while a node fault waits or runs
        with _locked(self.root / "nodes.lock", fcntl.LOCK_SH):
            waited = time.monotonic() - asked
            if waited > 0.5:
                self.waited_for_faults += waited
                self.waits_for_faults += 1
            self._kept = 1
            try:
                yield
            finally:
                self._kept = 0

    def take_the_nodes(self) -> None:
        """From now until `give_the_nodes_back`, no other run's test works on the nodes; a no-op
        while this run holds them already, so that consecutive node faults wait for the other
        runs' tests once, not once each."""
        if self._exclusive is not None:
            return
        asked = time.monotonic()
        turnstile = open(self.root / "nodes-turnstile.lock", "a")
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        nodes = open(self.root / "nodes.lock", "a")
        fcntl.flock(nodes, fcntl.LOCK_EX)
        got = time.monotonic()
        if got - asked > 0.5:
            self.waited_to_fault += got - asked
            self.waits_to_fault += 1
        self._exclusive, self._exclusive_since = (turnstile, nodes), got

    def give_the_nodes_back(self) -> None:
        if self._exclusive is None:
            return
        turnstile, nodes = self._exclusive
        self._exclusive = None
        self.held_to_itself += time.monotonic() - self._exclusive_since
        for file in (nodes, turnstile):
            fcntl.flock(file, fcntl.LOCK_UN)
            file.close()

    @contextlib.contextmanager
    def nodes_to_itself(self) -> Iterator[None]:
        """While the block runs, no other run's test works on the nodes (inside a longer hold
        of this run, the block keeps it)."""
        if self._exclusive is not None:
            yield
            return
        self.take_the_nodes()
        try:
            yield
        finally:
            self.give_the_nodes_back()

    def lock_report(self) -> str:
        return (
            f"real nodes: this run waited {self.waited_for_faults:.0f}s ({self.waits_for_faults} times) while "
            f"another run faulted a node, {self.waited_to_fault:.0f}s ({self.waits_to_fault} times) to fault one "
            f"itself, and held the nodes to itself {self.held_to_itself:.0f}s"
        )

    def wait_until_only_user(self) -> None:
        """Blocks until every other run let go of the instance, which is then this run's to
        take down."""
        self._down_check = open(self.root / "down-check.lock", "a")
        fcntl.flock(self._down_check, fcntl.LOCK_EX)
        fcntl.flock(self._users, fcntl.LOCK_EX)

    def end(self) -> None:
        """Lets go; takes the instance down if this run is its last user, unless another run's
        check of `down` waits for it."""
        try:
            if self._down_check is None and controlplane.apiserver_ready(self.where):
                with open(self.root / "down-check.lock", "a") as down_check:
                    try:
                        fcntl.flock(down_check, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        fcntl.flock(self._users, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        return  # another run still uses it, or checks `down` and takes it down
                    controlplane.down(self.where)
        finally:
            self._users.close()
            if self._down_check is not None:
                self._down_check.close()


@contextlib.contextmanager
def used(root: pathlib.Path, faults_first: bool = False) -> Iterator[SharedUse]:
    """The instance in `root`, up (brought up here, or joined) for as long as the block runs."""
    started = time.monotonic()
    use = SharedUse(root, localkube_layout.current(root)).start(faults_first)
    how = "up" if use.started_here else "joined"
    measured.report(f"real nodes: control plane and three Ready nodes {how} in {time.monotonic() - started:.1f}s")
    try:
        yield use
    finally:
        use.give_the_nodes_back()
        measured.report(use.lock_report())
        use.end()
