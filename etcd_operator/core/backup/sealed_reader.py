"""Random access to the plain bytes of a stored object through ranged reads, whether it is
sealed (core/backup/sealed.py) or plain: what bbolt.py reads a snapshot's revision and
storage version through. Opening a sealed object reads its header, trailer and index, and
decrypts the index: a missing or wrong key fails there, before any data is read. Pure: the
reads are injected."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

from etcd_operator.core.backup import sealed
from etcd_operator.core.backup.bbolt import ReadRange

CHUNKS_CACHED = 4  # bbolt reads a handful of pages, often from the same chunk


class PlainReader:
    """`read(offset, length)` over the plain bytes; `size` is their length. This one reads a
    plain object as it is stored."""

    header: sealed.Header | None = None

    def __init__(self, read: ReadRange, size: int):
        self._read = read
        self.size = size

    async def read(self, offset: int, length: int) -> bytes:
        length = max(0, min(length, self.size - offset))
        return await self._read(offset, length) if length else b""


class SealedReader(PlainReader):
    def __init__(
        self, read: ReadRange, header: sealed.Header, key: bytes | None, index: sealed.Index, index_offset: int
    ):
        super().__init__(read, index.plain_size)
        self.header = header
        self._key = key
        self._chunk_bytes = header.chunk_bytes
        self._ends = (*index.offsets[1:], index_offset)  # where each data record ends
        self._offsets = index.offsets
        self._cache: OrderedDict[int, bytes] = OrderedDict()

    async def read(self, offset: int, length: int) -> bytes:
        length = max(0, min(length, self.size - offset))
        out = []
        while length > 0:
            number, within = divmod(offset, self._chunk_bytes)
            piece = (await self._chunk(number))[within : within + length]
            if not piece:
                raise sealed.SealedError(f"chunk {number} is shorter than the index says")
            out.append(piece)
            offset += len(piece)
            length -= len(piece)
        return b"".join(out)

    async def _chunk(self, number: int) -> bytes:
        if number in self._cache:
            self._cache.move_to_end(number)
            return self._cache[number]
        assert self.header is not None
        start, end = self._offsets[number], self._ends[number]
        record = await self._read(start, end - start)
        kind, length = sealed.record_head(record)
        if kind != sealed.DATA or sealed.RECORD_HEAD_BYTES + length != len(record):
            raise sealed.SealedError(f"record {number} is not where the index says")
        plain = sealed.open_data(self.header, self._key, number, record[sealed.RECORD_HEAD_BYTES :])
        self._cache[number] = plain
        if len(self._cache) > CHUNKS_CACHED:
            self._cache.popitem(last=False)
        return plain


async def open_plain(read: ReadRange, stored_size: int, keys: Mapping[str, bytes] | None = None) -> PlainReader:
    """A reader over the plain bytes of the object of `stored_size` bytes. Raises
    sealed.SealedError (KeyMissing, DecryptionFailed) when a sealed one cannot be opened,
    and sealed.PlaintextRefused when `keys` are given and the object is not encrypted."""
    head = await read(0, min(stored_size, sealed.MAX_HEADER_BYTES))
    if len(head) < len(sealed.MAGIC) or not sealed.is_sealed(head):
        if keys:
            raise sealed.plaintext_refusal(False)
        return PlainReader(read, stored_size)
    header = sealed.Header.parse(head)
    if header is None or stored_size < len(header.raw) + sealed.TRAILER_BYTES:
        raise sealed.SealedError("the object is too short for its header and trailer: it was cut short")
    if keys and not header.encrypted:
        raise sealed.plaintext_refusal(True)
    key = sealed.key_for(header, keys or {})
    record_end = stored_size - sealed.TRAILER_BYTES
    index_offset = sealed.trailer_offset(await read(record_end, sealed.TRAILER_BYTES))
    if not len(header.raw) <= index_offset < record_end:
        raise sealed.SealedError("the trailer points outside the object")
    record = await read(index_offset, record_end - index_offset)
    kind, length = sealed.record_head(record)
    if kind != sealed.INDEX or sealed.RECORD_HEAD_BYTES + length != len(record):
        raise sealed.SealedError("the trailer does not point at the index record")
    index = sealed.open_index(header, key, record[sealed.RECORD_HEAD_BYTES :])
    offsets = list(index.offsets)
    bounds = [len(header.raw), *offsets, index_offset]
    if (offsets and offsets[0] != len(header.raw)) or any(a >= b for a, b in zip(bounds[1:], bounds[2:], strict=False)):
        raise sealed.SealedError("the index's offsets are out of order or outside the object")
    return SealedReader(read, header, key, index, index_offset)
