"""The session's chart release on the tests' real-node instance, shared by the two real-node
runs of `make test` (tests/run.sh), with files in the instance's root:

- `release-users/<pid>`, one per run that uses the release. The run that finds no other live
  user installs it afresh (a release an earlier session left goes first); the last to leave
  uninstalls it. `release-install.lock` makes that look and the install one step;
- `release.lock`, held shared while a test relies on the release as installed
  (`release_kept`), and exclusively by a test that uninstalls, scales, upgrades or replaces it
  (`take_the_release` to `give_the_release_back`, over consecutive such tests);
  `release-turnstile.lock` lets a waiting one in before the next test takes its shared lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pathlib
import time
from collections.abc import Callable, Iterator

from tests.support.shared_real_nodes import locked


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class SharedRelease:
    """One run's use of the release."""

    def __init__(self, root: pathlib.Path):
        self.root = root
        self._users = root / "release-users"
        self._kept = 0
        self._exclusive: tuple | None = None
        self.waited = 0.0  # seconds this run's tests waited for another run's use of the release

    def join(self, install: Callable[[], None]) -> bool:
        """Marks this run a user; `install()` (uninstall and install) when no other live run
        uses the release, holding the release to this run meanwhile, so that a run joining
        after it never finds the release half made. Returns whether it installed. Call it
        before this run keeps the release for a test (`release_kept`)."""
        self._users.mkdir(parents=True, exist_ok=True)
        with locked(self.root / "release-install.lock", fcntl.LOCK_EX):
            others = [p for p in self._users.iterdir() if p.name != str(os.getpid())]
            live = [p for p in others if p.name.isdigit() and _alive(int(p.name))]
            for stale in set(others) - set(live):
                stale.unlink(missing_ok=True)
            (self._users / str(os.getpid())).touch()
            if live:
                return False
            holding = self._exclusive is not None
            self.take_the_release()
            try:
                install()
            finally:
                if not holding:
                    self.give_the_release_back()
            return True

    def leave(self, uninstall: Callable[[], None]) -> None:
        """`uninstall()` when this run was the last live user."""
        with locked(self.root / "release-install.lock", fcntl.LOCK_EX):
            (self._users / str(os.getpid())).unlink(missing_ok=True)
            if not [p for p in self._users.iterdir() if p.name.isdigit() and _alive(int(p.name))]:
                uninstall()

    @contextlib.contextmanager
    def release_kept(self) -> Iterator[None]:
        """While the block runs, no other run's test uninstalls, scales or upgrades the release
        (re-entrant; a no-op while this run holds it exclusively)."""
        if self._kept or self._exclusive is not None:
            self._kept += 1
            try:
                yield
            finally:
                self._kept -= 1
            return
        asked = time.monotonic()
        with locked(self.root / "release-turnstile.lock", fcntl.LOCK_SH):
            pass  # waits while another run's test waits to take the release, or has it
        with locked(self.root / "release.lock", fcntl.LOCK_SH):
            self.waited += time.monotonic() - asked
            self._kept = 1
            try:
                yield
            finally:
                self._kept = 0

    def take_the_release(self) -> None:
        """From now until `give_the_release_back`, no other run's test relies on the release."""
        if self._exclusive is not None:
            return
        asked = time.monotonic()
        turnstile = open(self.root / "release-turnstile.lock", "a")
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        release = open(self.root / "release.lock", "a")
        fcntl.flock(release, fcntl.LOCK_EX)
        self.waited += time.monotonic() - asked
        self._exclusive = (turnstile, release)

    def give_the_release_back(self) -> None:
        if self._exclusive is None:
            return
        turnstile, release = self._exclusive
        self._exclusive = None
        for file in (release, turnstile):
            fcntl.flock(file, fcntl.LOCK_UN)
            file.close()
