"""A managed block in /etc/hosts, marked with the checkout id so several checkouts can
share the file. The file is rewritten in place (it may be a bind mount), under an
exclusive flock, with one write of the whole content."""

from __future__ import annotations

import fcntl
import os
import pathlib


def markers(checkout_id: str) -> tuple[str, str]:
    return (
        f"# BEGIN localkube {checkout_id} (managed by the node agent, do not edit)",
        f"# END localkube {checkout_id}",
    )


def render_block(checkout_id: str, records: dict[str, set[str]]) -> str:
    """One line per address, listing its names; a name with several addresses appears
    on several lines (glibc with `multi on` and Go's resolver return them all)."""
    by_ip: dict[str, set[str]] = {}
    for name, ips in records.items():
        for ip in ips:
            by_ip.setdefault(ip, set()).add(name)
    begin, end = markers(checkout_id)
    lines = [begin]
    for ip in sorted(by_ip, key=_ip_key):
        lines.append(f"{ip} {' '.join(sorted(by_ip[ip]))}")
    lines.append(end)
    return "\n".join(lines) + "\n"


def replace_block(text: str, checkout_id: str, block: str | None) -> str:
    begin, end = markers(checkout_id)
    kept, inside = [], False
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped == begin:
            inside = True
            continue
        if inside:
            if stripped == end:
                inside = False
            continue
        kept.append(line)
    result = "".join(kept)
    if result and not result.endswith("\n"):
        result += "\n"
    return result + (block or "")


def _ip_key(ip: str) -> tuple[int, ...]:
    return tuple(int(part) for part in ip.split("."))


class HostsFile:
    def __init__(self, path: pathlib.Path, checkout_id: str):
        self.path = path
        self.checkout_id = checkout_id

    def write(self, records: dict[str, set[str]]) -> bool:
        """Puts the block in place (if someone else changed it, too); returns whether
        the file changed."""
        return self._rewrite(render_block(self.checkout_id, records))

    def remove(self) -> None:
        self._rewrite(None)

    def _rewrite(self, block: str | None) -> bool:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            with os.fdopen(os.dup(fd), "r+b") as f:
                old = f.read().decode(errors="surrogateescape")
                new = replace_block(old, self.checkout_id, block)
                if new == old:
                    return False
                data = new.encode(errors="surrogateescape")
                os.pwrite(fd, data, 0)
                os.ftruncate(fd, len(data))
                return True
        finally:
            os.close(fd)  # also drops the lock
