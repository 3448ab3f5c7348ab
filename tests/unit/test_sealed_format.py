"""The sealed object format (core/backup/sealed.py, sealed_reader.py): round trips, and
every way of altering a stored object is refused, never silently decoded."""

from __future__ import annotations

import asyncio
import os
import tracemalloc

import pytest

from etcd_operator.core.backup import sealed, sealed_reader

KEY = bytes(range(32))
OTHER_KEY = bytes(reversed(range(32)))
ENCRYPTED = sealed.Encoding(algorithm="aes-256-gcm", key_id="k1", key=KEY, chunk_bytes=4096)
COMPRESSED = sealed.Encoding(chunk_bytes=4096)
DATA = os.urandom(5000) + b'{"kind":"ConfigMap","metadata":{"name":"x"}}' * 2000


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def stored(encoding: sealed.Encoding, data: bytes = DATA) -> bytes:
    return b"".join(sealed.encode(pieces(data, 3001), encoding))


def decoded(blob: bytes, keys=None, piece: int = 777) -> bytes:
    return b"".join(sealed.decode(pieces(blob, piece), keys))


def records(blob: bytes) -> list[tuple[int, int]]:
    """(offset, length) of each record, header excluded, trailer excluded."""
    header = sealed.Header.parse(blob)
    assert header is not None
    offset, out = len(header.raw), []
    while offset < len(blob) - sealed.TRAILER_BYTES:
        _, length = sealed.record_head(blob[offset:])
        out.append((offset, sealed.RECORD_HEAD_BYTES + length))
        offset += sealed.RECORD_HEAD_BYTES + length
    return out


@pytest.mark.parametrize(
    "encoding",
    [COMPRESSED, ENCRYPTED, sealed.Encoding(compression="none", algorithm="aes-256-gcm", key_id="k1", key=KEY)],
)
@pytest.mark.parametrize("piece", [1, 100, 1 << 20])
def test_round_trip_in_any_pieces(encoding, piece):
    blob = stored(encoding)
    assert sealed.is_sealed(blob)
    assert decoded(blob, {"k1": KEY, "other": OTHER_KEY}, piece) == DATA


def test_zstd_compresses_and_encryption_hides_the_text():
    plain_json = b'{"kind":"ConfigMap","metadata":{"name":"x"}}' * 2000
    blob = stored(ENCRYPTED, plain_json)
    assert len(blob) < len(plain_json) / 10
    assert b"ConfigMap" not in blob
    assert b"ConfigMap" in stored(sealed.Encoding(compression="none", algorithm="none"), plain_json)


def test_empty_input_round_trips():
    assert decoded(stored(ENCRYPTED, b""), {"k1": KEY}) == b""


def test_plain_objects_pass_through_unchanged():
    bbolt_like = bytes(16) + os.urandom(10000)
    assert decoded(bbolt_like) == bbolt_like
    assert decoded(b"abc") == b"abc"  # shorter than the magic
    assert b"".join(sealed.encode([b"abc", b"def"], sealed.PLAIN)) == b"abcdef"


def test_the_nonce_prefix_differs_between_objects():
    first, second = sealed.Header.parse(stored(ENCRYPTED)), sealed.Header.parse(stored(ENCRYPTED))
    assert first and second and first.nonce_prefix != second.nonce_prefix


def test_a_wrong_key_under_the_same_id_is_refused():
    with pytest.raises(sealed.DecryptionFailed):
        decoded(stored(ENCRYPTED), {"k1": OTHER_KEY})


def test_a_missing_key_id_is_refused_naming_the_ids():
    with pytest.raises(sealed.KeyMissing, match="'k1'.*other"):
        decoded(stored(ENCRYPTED), {"other": KEY})
    with pytest.raises(sealed.KeyMissing):
        decoded(stored(ENCRYPTED), None)


def test_a_flipped_bit_anywhere_in_a_record_is_refused():
    blob = bytearray(stored(ENCRYPTED))
    for offset, length in records(bytes(blob)):
        for at in (offset + sealed.RECORD_HEAD_BYTES, offset + length - 1):
            altered = bytearray(blob)
            altered[at] ^= 1
            with pytest.raises(sealed.SealedError):
                decoded(bytes(altered), {"k1": KEY})


def test_an_altered_header_is_refused():
    blob = bytearray(stored(ENCRYPTED))
    header = sealed.Header.parse(bytes(blob))
    assert header is not None
    blob[len(sealed.MAGIC) + 8] ^= 1  # inside the nonce prefix
    with pytest.raises(sealed.DecryptionFailed):
        decoded(bytes(blob), {"k1": KEY})


def test_swapped_records_are_refused():
    blob = stored(ENCRYPTED, os.urandom(20000))
    (a, la), (b, lb) = records(blob)[:2]
    assert la == lb  # equal-size chunks: the swap keeps every offset
    swapped = blob[:a] + blob[b : b + lb] + blob[a : a + la] + blob[b + lb :]
    with pytest.raises(sealed.DecryptionFailed):
        decoded(swapped, {"k1": KEY})


def test_a_dropped_record_is_refused():
    blob = stored(ENCRYPTED)
    offset, length = records(blob)[1]
    with pytest.raises(sealed.SealedError):
        decoded(blob[:offset] + blob[offset + length :], {"k1": KEY})


def test_a_dropped_record_is_refused_without_encryption_too():
    blob = stored(COMPRESSED)
    offset, length = records(blob)[1]
    with pytest.raises(sealed.SealedError, match="dropped or moved"):
        decoded(blob[:offset] + blob[offset + length :])


@pytest.mark.parametrize("cut", [1, sealed.TRAILER_BYTES, sealed.TRAILER_BYTES + 1, 5000])
def test_a_truncated_object_is_refused(cut):
    blob = stored(ENCRYPTED)
    with pytest.raises(sealed.SealedError):
        decoded(blob[:-cut], {"k1": KEY})


def test_a_truncated_object_cut_at_a_record_boundary_is_refused():
    blob = stored(ENCRYPTED)
    index_offset, _ = records(blob)[-1]
    with pytest.raises(sealed.SealedError, match="cut short"):
        decoded(blob[:index_offset], {"k1": KEY})


def test_bytes_after_the_trailer_are_refused():
    with pytest.raises(sealed.SealedError, match="follow the trailer"):
        decoded(stored(ENCRYPTED) + b"x", {"k1": KEY})


def test_a_record_from_another_object_under_the_same_key_is_refused():
    first, second = stored(ENCRYPTED), stored(ENCRYPTED)
    offset, length = records(first)[0]
    mixed = first[:offset] + second[offset : offset + length] + first[offset + length :]
    with pytest.raises(sealed.DecryptionFailed):
        decoded(mixed, {"k1": KEY})


def test_encoding_refuses_a_short_key():
    with pytest.raises(ValueError, match="32 bytes"):
        sealed.Encoding(algorithm="aes-256-gcm", key_id="k1", key=b"short")


def test_memory_stays_bounded_by_the_chunk_size():
    encoding = sealed.Encoding(algorithm="aes-256-gcm", key_id="k1", key=KEY, chunk_bytes=64 << 10)
    total = 48 << 20

    def source():
        block = os.urandom(1 << 16)
        for _ in range(total // len(block)):
            yield block

    tracemalloc.start()
    try:
        plain_bytes = sum(len(p) for p in sealed.decode(sealed.encode(source(), encoding), {"k1": KEY}))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert plain_bytes == total
    assert peak < 2 << 20  # a few chunks, never the object


def run(coro):
    return asyncio.run(coro)


def reader_for(blob: bytes, keys=None):
    async def read(offset: int, length: int) -> bytes:
        return blob[offset : offset + length]

    return run(sealed_reader.open_plain(read, len(blob), keys))


@pytest.mark.parametrize("encoding", [COMPRESSED, ENCRYPTED])
def test_random_access_reads_the_plain_bytes(encoding):
    reader = reader_for(stored(encoding), {"k1": KEY})
    assert reader.size == len(DATA)
    for offset, length in [(0, 1), (4090, 20), (len(DATA) - 3, 100), (1000, 30000)]:
        assert run(reader.read(offset, length)) == DATA[offset : offset + length]


def test_random_access_to_a_plain_object_reads_it_as_stored():
    reader = reader_for(DATA)
    assert reader.header is None and run(reader.read(10, 5)) == DATA[10:15]


def test_random_access_with_a_wrong_key_fails_when_opened():
    with pytest.raises(sealed.DecryptionFailed):
        reader_for(stored(ENCRYPTED), {"k1": OTHER_KEY})
    with pytest.raises(sealed.KeyMissing):
        reader_for(stored(ENCRYPTED), {})


def test_random_access_refuses_a_truncated_object():
    with pytest.raises(sealed.SealedError):
        reader_for(stored(ENCRYPTED)[:-1], {"k1": KEY})
