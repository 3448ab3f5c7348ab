"""Reads the store revision of an etcd snapshot (a bbolt file) with a handful of random
reads: the newest key of etcd's "key" bucket, whose keys are revisions. The same number
`etcdutl snapshot status` reports, without downloading the whole file; and the storage
version etcd 3.6+ records in its "meta" bucket."""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable

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
    body = page[PAGE_HEADER : PAGE_HEADER + 64]
    magic, _version, page_size, _flags, root, _seq, _freelist, _pgid, txid, checksum = struct.unpack(
        "<IIIIQQQQQQ", body
    )
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
    key = page[at + pos : at + pos + ksize]
    return flags, key, page[at + pos + ksize : at + pos + ksize + vsize]


def _branch_child(page: bytes, index: int) -> int:
    at = PAGE_HEADER + index * ELEMENT
    child: int = struct.unpack_from("<IIQ", page, at)[2]  # struct's values are typed Any
    return child


async def _lookup(pages: _Pages, page: bytes, name: bytes) -> tuple[int, bytes] | None:
    """(element flags, value) stored under `name` in the tree whose top page is `page`."""
    for _ in range(MAX_DEPTH):
        flags, count = _elements(page)
        if flags & LEAF:
            for i in range(count):
                entry_flags, key, value = _leaf_entry(page, i)
                if key == name:
                    return entry_flags, value
            return None
        if count == 0:
            return None
        keys = []
        for i in range(count):
            at = PAGE_HEADER + i * ELEMENT
            pos, ksize, child = struct.unpack_from("<IIQ", page, at)
            keys.append((page[at + pos : at + pos + ksize], child))
        candidates = [child for key, child in keys if key <= name]
        page = await pages.page(candidates[-1] if candidates else keys[0][1])
    raise NotASnapshot("bucket tree too deep")


async def _find_bucket(pages: _Pages, root: int, name: bytes) -> bytes:
    """The bucket header (+ inline page) stored under `name` in the root bucket."""
    found = await _lookup(pages, await pages.page(root), name)
    if found is None or not found[0] & BUCKET_LEAF:
        raise NotASnapshot(f"no {name.decode()!r} bucket: not an etcd snapshot")
    return found[1]


async def _bucket_top_page(pages: _Pages, bucket: bytes) -> bytes:
    root = struct.unpack_from("<Q", bucket, 0)[0]
    return bucket[16:] if root == 0 else await pages.page(root)  # inline: its only page follows the header


async def _last_key(pages: _Pages, bucket: bytes) -> bytes | None:
    page = await _bucket_top_page(pages, bucket)
    for _ in range(MAX_DEPTH):
        flags, count = _elements(page)
        if count == 0:
            return None
        if flags & LEAF:
            return _leaf_entry(page, count - 1)[1]
        page = await pages.page(_branch_child(page, count - 1))
    raise NotASnapshot("key tree too deep")


async def _open(read: ReadRange) -> tuple[_Pages, int]:
    """The pages of a snapshot and the root bucket page id of its newest valid meta page."""
    first = await read(0, 4096)
    meta0 = _meta(first)
    if meta0 is None:
        raise NotASnapshot("no valid bbolt meta page")
    page_size = meta0[0]
    meta1 = _meta(await read(page_size, page_size))
    _, root, _ = max((m for m in (meta0, meta1) if m), key=lambda m: m[2])
    return _Pages(read, page_size), root


async def snapshot_revision(read: ReadRange) -> int:
    pages, root = await _open(read)
    last = await _last_key(pages, await _find_bucket(pages, root, b"key"))
    if last is None:
        return 1  # an empty store is at revision 1
    revision: int = struct.unpack_from(">q", last, 0)[0]  # struct's values are typed Any
    return revision


async def snapshot_storage_version(read: ReadRange) -> str | None:
    """The storage version etcd 3.6+ records in the "meta" bucket under "storageVersion"
    (e.g. "3.6.0"; empty while a 3.6 member is still migrating). None when the key is
    absent: the data was written in the schema of etcd 3.5 or older."""
    pages, root = await _open(read)
    meta = await _bucket_top_page(pages, await _find_bucket(pages, root, b"meta"))
    found = await _lookup(pages, meta, b"storageVersion")
    if found is None:
        return None
    if found[0] & BUCKET_LEAF:
        raise NotASnapshot("meta/storageVersion is a bucket: not an etcd snapshot")
    return found[1].decode("ascii", errors="replace")
