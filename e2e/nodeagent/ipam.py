"""Pod IP allocation in the checkout's 127.X.0.0/16, persisted so an agent restart keeps
every pod's address. Nodes use 127.X.0.2.. ; pods get 127.X.1.2 .. 127.X.254.254,
never .0, .1 or .255, handed out round-robin so a released address is not reused soon."""

from __future__ import annotations

import json
import os
import pathlib

HOSTS_PER_BLOCK = 253  # last octet 2..254
FIRST_BLOCK = 1
BLOCKS = 254  # third octet 1..254


def node_ip(octet: int, index: int) -> str:
    return f"127.{octet}.0.{2 + index}"


class IpPool:
    def __init__(self, path: pathlib.Path, octet: int):
        self.path = path
        self.octet = octet
        self.assigned: dict[str, str] = {}
        self.cursor = 0
        if path.exists():
            state = json.loads(path.read_text())
            self.assigned = dict(state.get("assigned", {}))
            self.cursor = int(state.get("cursor", 0))

    def _address(self, n: int) -> str:
        block, host = divmod(n % (HOSTS_PER_BLOCK * BLOCKS), HOSTS_PER_BLOCK)
        return f"127.{self.octet}.{FIRST_BLOCK + block}.{2 + host}"

    def lookup(self, uid: str) -> str | None:
        return self.assigned.get(uid)

    def allocate(self, uid: str) -> str:
        if uid in self.assigned:
            return self.assigned[uid]
        taken = set(self.assigned.values())
        for step in range(HOSTS_PER_BLOCK * BLOCKS):
            address = self._address(self.cursor + step)
            if address not in taken:
                self.cursor = self.cursor + step + 1
                self.assigned[uid] = address
                self._save()
                return address
        raise RuntimeError("pod address range exhausted")

    def release(self, uid: str) -> None:
        if self.assigned.pop(uid, None) is not None:
            self._save()

    def retain(self, uids: set[str]) -> None:
        """Releases every address whose pod no longer exists."""
        stale = [uid for uid in self.assigned if uid not in uids]
        for uid in stale:
            del self.assigned[uid]
        if stale:
            self._save()

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"cursor": self.cursor, "assigned": self.assigned}, indent=1))
        os.replace(tmp, self.path)
