"""Keeps the operator's memory flat while it streams large snapshots.

glibc raises its mmap threshold after large blocks are freed, so later multi-megabyte
buffers (snapshot parts) come from the heap and their pages stay resident long after
they are freed; and every worker thread grows a heap arena of its own. Fixing the
threshold makes every such buffer its own mapping, returned to the system as soon as the
part is uploaded, and two arenas serve all threads."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
LARGE_BUFFER_BYTES = 1 << 20
ARENAS = 2  # worker threads (S3, snapshot readers) would each grow an arena of their own

logger = logging.getLogger(__name__)


def return_large_buffers_to_the_system() -> bool:
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        return bool(libc.mallopt(M_MMAP_THRESHOLD, LARGE_BUFFER_BYTES)) and bool(libc.mallopt(M_ARENA_MAX, ARENAS))
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to tune
        logger.debug("mallopt is not available; large buffers use the default allocator policy")
        return False
