"""Reads the store revision of an etcd snapshot (a bbolt file) with a handful of random
reads: the newest key of etcd's "key" bucket, whose keys are revisions. The same number
`etcdutl snapshot status` reports, without downloading the whole file."""

from __future__ import annotations

import struct
from typing import Awaitable, Callable

ReadRange = Callable[[int, int], Awaitable[bytes]]  # (offset, length) -> bytes

MAGIC = 0xED0CDAED
PAGE_HEADER = 16
ELEMENT = 16
BRANCH, LEAF, META = 0x01, 0x02, 0x04
BUCKET_LEAF = 0x01
MAX_DEPTH = 64


class NotASnapshot(ValueError):
    pass


def _fnv64a(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for byte in data:
        h ^= byte
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def _meta(page: bytes) -> tuple[int, int, int] | None:
    """(page size, root bucket page id, txid) of a valid meta page, else None."""
    if len(page) < PAGE_HEADER + 64 or not struct.unpack_from("<H", page, 8)[0] & META:
        return None
    body = page[PAGE_HEADER:PAGE_HEADER + 64]
    magic, _version, page_size, _flags, root, _seq, _freelist, _pgid, txid, checksum = struct.unpack(
        "<IIIIQQQQQQ", body)
    if magic != MAGIC or _fnv64a(body[:56]) != checksum:
        return None
    return page_size, root, txid


class _Pages:
    def __init__(self, read: ReadRange, page_size: int):
        self.read = read
        self.size = page_size

    async def page(self, pgid: int) -> bytes:
        head = await self.read(pgid * self.size, self.size)
        overflow = struct.unpack_from("<I", head, 12)[0]
        if overflow:
            head += await self.read((pgid + 1) * self.size, overflow * self.size)
        return head


def _elements(page: bytes) -> tuple[int, int]:
    flags, count = struct.unpack_from("<HH", page, 8)
    return flags, count


def _leaf_entry(page: bytes, index: int) -> tuple[int, bytes, bytes]:
    at = PAGE_HEADER + index * ELEMENT
    flags, pos, ksize, vsize = struct.unpack_from("<IIII", page, at)
    key = page[at + pos: at + pos + ksize]
    return flags, key, page[at + pos + ksize: at + pos + ksize + vsize]


def _branch_child(page: bytes, index: int) -> int:
    at = PAGE_HEADER + index * ELEMENT
    return struct.unpack_from("<IIQ", page, at)[2]


async def _find_bucket(pages: _Pages, root: int, name: bytes) -> bytes:
    """The bucket header (+ inline page) stored under `name` in the root bucket."""
    pgid = root
    for _ in range(MAX_DEPTH):
        page = await pages.page(pgid)
        flags, count = _elements(page)
        if flags & LEAF:
            for i in range(count):
                entry_flags, key, value = _leaf_entry(page, i)
                if key == name and entry_flags & BUCKET_LEAF:
                    return value
            raise NotASnapshot(f"no {name.decode()!r} bucket: not an etcd snapshot")
        keys = []
        for i in range(count):
            at = PAGE_HEADER + i * ELEMENT
            pos, ksize, child = struct.unpack_from("<IIQ", page, at)
            keys.append((page[at + pos: at + pos + ksize], child))
        candidates = [child for key, child in keys if key <= name]
        pgid = candidates[-1] if candidates else keys[0][1]
    raise NotASnapshot("bucket tree too deep")


async def _last_key(pages: _Pages, bucket: bytes) -> bytes | None:
    root = struct.unpack_from("<Q", bucket, 0)[0]
    if root == 0:
        page = bucket[16:]  # inline bucket: its only page follows the header
    else:
        page = await pages.page(root)
    for _ in range(MAX_DEPTH):
        flags, count = _elements(page)
        if count == 0:
            return None
        if flags & LEAF:
            return _leaf_entry(page, count - 1)[1]
        page = await pages.page(_branch_child(page, count - 1))
    raise NotASnapshot("key tree too deep")


async def snapshot_revision(read: ReadRange) -> int:
    first = await read(0, 4096)
    meta0 = _meta(first)
    if meta0 is None:
        raise NotASnapshot("no valid bbolt meta page")
    page_size = meta0[0]
    meta1 = _meta(await read(page_size, page_size))
    _, root, _ = max((m for m in (meta0, meta1) if m), key=lambda m: m[2])
    pages = _Pages(read, page_size)
    last = await _last_key(pages, await _find_bucket(pages, root, b"key"))
    if last is None:
        return 1  # an empty store is at revision 1
    return struct.unpack_from(">q", last, 0)[0]
