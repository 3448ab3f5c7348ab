"""Writes a point-in-time replay's revisions straight into a restored etcd backend, through
`etcd-replay-apply` (cmd/etcd-replay-apply: etcd's own storage code, mvcc and lessor) while
no etcd serves it. The program checks every revision's number before and after it writes
it, and stops at the first that would land elsewhere; this side streams the frames and
reads its verdict once the input ends (`finish`)."""

from __future__ import annotations

import asyncio
import json
import pathlib
import struct
from collections.abc import Sequence

from etcd_operator.core.backup.segments import KeyChange

APPLY_PROGRAM = "etcd-replay-apply"  # on PATH in the operator's image
OPEN_SECONDS = 120.0  # a large backend is read into memory before the first frame
DRAIN_BYTES = 4 << 20  # frames are buffered up to this much before waiting for the program

_GRANT = struct.Struct("<cqq")
_REVISION = struct.Struct("<cqI")
_PUT = struct.Struct("<BI")
_LENGTH = struct.Struct("<I")
_LEASE = struct.Struct("<q")

# The program's exit codes (cmd/etcd-replay-apply/main.go) and the replay's refusal for each.
_REFUSALS = {3: "RevisionMismatch", 4: "LeaseUnknown"}


class ApplyFailed(Exception):
    """The program refused or failed; `reason` names a replay refusal where it refused."""

    def __init__(self, exit_code: int | None, message: str):
        super().__init__(message)
        self.exit_code = exit_code
        self.message = message

    @property
    def reason(self) -> str | None:
        return _REFUSALS.get(self.exit_code) if self.exit_code is not None else None


def grant_frame(lease: int, ttl: int) -> bytes:
    return _GRANT.pack(b"G", lease, ttl)


def revision_frame(revision: int, changes: Sequence[KeyChange]) -> bytes:
    parts = [_REVISION.pack(b"R", revision, len(changes))]
    for c in changes:
        if c.value is None:
            parts += (_PUT.pack(1, len(c.key)), c.key)
        else:
            parts += (_PUT.pack(0, len(c.key)), c.key, _LENGTH.pack(len(c.value)), c.value, _LEASE.pack(c.lease))
    return b"".join(parts)


class BackendApplier:
    """One run of the program over `db` (a restored member's member/snap/db). Opened, it
    says the store's revision and leases; each `apply` is one revision; `finish` ends the
    input and returns the program's (revision, revisions applied)."""

    def __init__(self, db: pathlib.Path, program: str = APPLY_PROGRAM):
        self.db = db
        self.program = program
        self.revision = 0
        self.leases: list[tuple[int, int]] = []  # (ID, TTL) the backend holds
        self._process: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> BackendApplier:
        try:
            self._process = await asyncio.create_subprocess_exec(
                self.program,
                str(self.db),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as e:
            raise ApplyFailed(None, f"{self.program} could not be started: {e}") from None
        try:
            opened = json.loads(await asyncio.wait_for(self._stdout.readline(), OPEN_SECONDS) or b"null")
        except (TimeoutError, ValueError):
            opened = None
        if not isinstance(opened, dict):
            raise await self._failure(f"{self.program} did not open {self.db}")
        self.revision = int(opened["revision"])
        self.leases = [(int(lease), int(ttl)) for lease, ttl in opened.get("leases") or []]
        return self

    async def __aexit__(self, *exc: object) -> None:
        process = self._process
        if process is not None and process.returncode is None:
            process.kill()
            await process.wait()

    @property
    def _stdout(self) -> asyncio.StreamReader:
        assert self._process is not None and self._process.stdout is not None
        return self._process.stdout

    async def _write(self, frame: bytes) -> None:
        assert self._process is not None and self._process.stdin is not None
        stdin = self._process.stdin
        try:
            stdin.write(frame)
            if stdin.transport.get_write_buffer_size() > DRAIN_BYTES:
                await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            raise await self._failure("the program stopped reading") from None

    async def grant_lease(self, lease: int, ttl: int) -> bool:
        await self._write(grant_frame(lease, ttl))
        return True

    async def apply(self, revision: int, changes: Sequence[KeyChange]) -> None:
        """Queues `changes` as revision `revision`; the program refuses it (and everything
        after it) unless the store lands on exactly that number."""
        await self._write(revision_frame(revision, changes))

    async def finish(self) -> tuple[int, int]:
        assert self._process is not None and self._process.stdin is not None
        stdin = self._process.stdin
        try:
            await stdin.drain()
            stdin.close()
            await stdin.wait_closed()
        except (BrokenPipeError, ConnectionResetError):
            pass  # it stopped early: its exit code says why
        line = await self._stdout.readline()
        if await self._process.wait() != 0:
            raise await self._failure("the program failed")
        done = json.loads(line)
        return int(done["revision"]), int(done["applied"])

    async def _failure(self, fallback: str) -> ApplyFailed:
        """The program's verdict: its exit code and the last line it wrote to stderr."""
        assert self._process is not None and self._process.stderr is not None
        if self._process.returncode is None:
            try:
                await asyncio.wait_for(self._process.wait(), 10)
            except TimeoutError:
                self._process.kill()
                await self._process.wait()
        said = (await self._process.stderr.read()).decode(errors="replace").strip().splitlines()
        return ApplyFailed(self._process.returncode, said[-1] if said else fallback)
