"""Keeps the operator's memory flat while it streams large snapshots.

glibc raises its mmap threshold after large blocks are freed, so later multi-megabyte
buffers (snapshot parts) come from the heap and their pages stay resident long after
they are freed. Fixing the threshold makes every such buffer its own mapping, returned
to the system as soon as the part is uploaded."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

M_MMAP_THRESHOLD = -3
LARGE_BUFFER_BYTES = 1 << 20

logger = logging.getLogger(__name__)


def return_large_buffers_to_the_system() -> bool:
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        return bool(libc.mallopt(M_MMAP_THRESHOLD, LARGE_BUFFER_BYTES))
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to tune
        logger.debug("mallopt is not available; large buffers use the default allocator policy")
        return False
