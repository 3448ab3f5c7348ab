"""Disk and backend-quota arithmetic for a member. Pure.

A member's volume holds, besides the bbolt database (at most the quota, and etcd may
overshoot it by one request), a second copy of it at times — defragmentation writes the
compacted copy next to the old file, and a follower receives a leader snapshot
(`*.snap.db`) beside its own database — plus the WAL: etcd keeps 5 segments of 64 MiB
(--max-wals) and preallocates the next one. Hence, for a volume of D bytes:

    quota = min(8 GiB, (D - 384 MiB) / 2)

That quota is used when spec.etcd.quotaBackendBytes is unset; a quota above it is refused.
"""

from __future__ import annotations

import re

MiB = 1024 * 1024
GiB = 1024 * MiB
WAL_SEGMENT = 64 * MiB
WAL_RESERVE = 6 * WAL_SEGMENT  # 5 retained segments (--max-wals) and 1 preallocated
MIN_QUOTA = 16 * MiB  # the CRD's minimum for quotaBackendBytes
MAX_QUOTA = 8 * GiB  # etcd's suggested maximum; the CRD's maximum

_QUANTITY = re.compile(r"^\s*(?P<number>[0-9]+(?:\.[0-9]+)?)(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?\s*$")
_FACTORS = {
    None: 1,
    "m": 0.001,
    "Ki": 1 << 10,
    "Mi": 1 << 20,
    "Gi": 1 << 30,
    "Ti": 1 << 40,
    "Pi": 1 << 50,
    "Ei": 1 << 60,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}


def parse_quantity(text: str | int | None) -> int | None:
    """Bytes in a Kubernetes quantity ("2Gi", "500M", 1073741824); None if not one."""
    if text is None:
        return None
    if isinstance(text, int):
        return text
    match = _QUANTITY.match(str(text))
    if not match:
        return None
    number = match.group("number")
    factor = _FACTORS[match.group("suffix")]
    if "." in number or isinstance(factor, float):
        return int(float(number) * factor)
    return int(number) * factor


def quota_for_disk(disk_bytes: int) -> int:
    """The largest backend quota a volume of disk_bytes holds with room for WAL and a copy."""
    return max(0, min(MAX_QUOTA, (disk_bytes - WAL_RESERVE) // 2))


def disk_needed(quota_bytes: int) -> int:
    """The smallest volume that holds a database of quota_bytes (inverse of quota_for_disk)."""
    return 2 * quota_bytes + WAL_RESERVE


def defrag_room_missing(disk_bytes: int | None, db_size: int, db_size_in_use: int) -> int:
    """Bytes missing on a volume of disk_bytes to write a defragmented copy (db_size_in_use)
    beside the current file (db_size) and the WAL; 0 when it fits or the disk is unknown."""
    if disk_bytes is None:
        return 0
    return max(0, db_size + db_size_in_use + WAL_RESERVE - disk_bytes)


def fits_headroom(quota_bytes: int) -> int:
    """Free space under the quota a database must leave before NOSPACE is disarmed: writes
    would raise the alarm again at once otherwise."""
    return max(MiB, quota_bytes // 20)
