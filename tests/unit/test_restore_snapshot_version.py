"""Reading a snapshot's storage version from its bbolt pages, against small bbolt files
laid out here by hand (meta pages, a branch page, leaf pages, inline buckets)."""

from __future__ import annotations

import asyncio
import struct

import pytest

from etcd_operator.core.backup.bbolt import (
    BRANCH,
    BUCKET_LEAF,
    LEAF,
    MAGIC,
    META,
    NotASnapshot,
    _fnv64a,
    snapshot_revision,
    snapshot_storage_version,
)

PAGE = 4096


def page_header(pgid: int, flags: int, count: int) -> bytes:
    return struct.pack("<QHHI", pgid, flags, count, 0)


def leaf(pgid: int, entries: list[tuple[bytes, bytes, int]]) -> bytes:
    """A leaf page of (key, value, flags) entries, keys sorted."""
    elements, data = b"", b""
    table = 16 * len(entries)
    for i, (key, value, flags) in enumerate(entries):
        pos = table - 16 * i + len(data)  # relative to this element
        elements += struct.pack("<IIII", flags, pos, len(key), len(value))
        data += key + value
    return page_header(pgid, LEAF, len(entries)) + elements + data


def branch(pgid: int, children: list[tuple[bytes, int]]) -> bytes:
    elements, data = b"", b""
    table = 16 * len(children)
    for i, (key, child) in enumerate(children):
        elements += struct.pack("<IIQ", table - 16 * i + len(data), len(key), child)
        data += key
    return page_header(pgid, BRANCH, len(children)) + elements + data


def inline_bucket(entries: list[tuple[bytes, bytes, int]]) -> bytes:
    return struct.pack("<QQ", 0, 0) + leaf(0, entries)


def meta(pgid: int, root: int, txid: int) -> bytes:
    body = struct.pack("<IIIIQQQQQ", MAGIC, 2, PAGE, 0, root, 0, 0, 8, txid)
    return page_header(pgid, META, 0) + body + struct.pack("<Q", _fnv64a(body))


def revision_key(main: int) -> bytes:
    return struct.pack(">q", main) + b"_" + struct.pack(">q", 0)


def snapshot(meta_entries: list[tuple[bytes, bytes, int]], meta_name: bytes = b"meta") -> bytes:
    """Root bucket on a branch page (2) over two leaves: 'cluster', 'key' (3) and 'meta' (4)."""
    keys = inline_bucket([(revision_key(5), b"v", 0), (revision_key(9), b"v", 0)])
    pages = {
        0: meta(0, 2, 1),
        1: meta(1, 2, 2),
        2: branch(2, [(b"cluster", 3), (b"meta", 4)]),
        3: leaf(3, [(b"cluster", inline_bucket([]), BUCKET_LEAF), (b"key", keys, BUCKET_LEAF)]),
        4: leaf(
            4, [(b"members", inline_bucket([]), BUCKET_LEAF), (meta_name, inline_bucket(meta_entries), BUCKET_LEAF)]
        ),
    }
    return b"".join(pages[i].ljust(PAGE, b"\0") for i in range(len(pages)))


def read(data: bytes):
    async def read_range(offset: int, length: int) -> bytes:
        return data[offset : offset + length]

    return read_range


def storage_version(data: bytes) -> str | None:
    return asyncio.run(snapshot_storage_version(read(data)))


def test_a_36_snapshot_names_its_storage_version():
    data = snapshot(
        [
            (b"confState", b"{}", 0),
            (b"consistent_index", b"\0" * 8, 0),
            (b"storageVersion", b"3.6.0", 0),
            (b"term", b"\0" * 8, 0),
        ]
    )
    assert storage_version(data) == "3.6.0"
    assert asyncio.run(snapshot_revision(read(data))) == 9


def test_a_35_snapshot_has_none():
    assert storage_version(snapshot([(b"confState", b"{}", 0), (b"consistent_index", b"\0" * 8, 0)])) is None


def test_a_migrating_36_member_leaves_it_empty():
    assert storage_version(snapshot([(b"storageVersion", b"", 0)])) == ""


def test_not_a_snapshot():
    with pytest.raises(NotASnapshot):
        storage_version(b"\0" * PAGE * 4)
    with pytest.raises(NotASnapshot):
        storage_version(snapshot([(b"storageVersion", b"3.6.0", 0)], meta_name=b"metz"))
