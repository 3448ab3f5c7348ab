"""The sealed object format (core/backup/sealed.py, sealed_reader.py): round trips, and
every way of altering a stored object is refused, never silently decoded."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import pathlib
import tracemalloc

import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from etcd_operator.core.backup import manifest, sealed, sealed_reader

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
    keys = {"k1": KEY, "other": OTHER_KEY} if encoding.encrypted else None
    assert decoded(blob, keys, piece) == DATA


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


def test_each_object_has_a_salt_and_so_a_key_of_its_own():
    first, second = sealed.Header.parse(stored(ENCRYPTED)), sealed.Header.parse(stored(ENCRYPTED))
    assert first and second and first.version == second.version == sealed.VERSION == 2
    assert len(first.random) == sealed.SALT_BYTES and first.random != second.random
    assert sealed.object_key(KEY, first.random) != sealed.object_key(KEY, second.random)


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
    blob[len(sealed.MAGIC) + 8] ^= 1  # inside the salt
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
    reader = reader_for(stored(encoding), {"k1": KEY} if encoding.encrypted else None)
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


# --- format version 2: published test vectors, version 1 still read ------------------------

FORMAT_PAGE = pathlib.Path(__file__).parents[2] / "docs" / "reference" / "sealed-format.md"
V1_FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "sealed-v1.hex"


def published_vectors() -> dict[str, str]:
    """The `name: value` lines of the format page's test-vector block (a value may go on
    over indented lines)."""
    text = FORMAT_PAGE.read_text()
    block = text.split("## Test vectors", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    vectors: dict[str, str] = {}
    name = ""
    for line in block.splitlines():
        if line.startswith(" "):
            vectors[name] += line.strip()
        else:
            name, value = line.split(":", 1)
            vectors[name] = value.strip()
    return vectors


def test_the_published_test_vectors_are_what_the_code_writes_and_reads():
    v = published_vectors()
    key, salt, plain = bytes.fromhex(v["backup key"]), bytes.fromhex(v["salt"]), bytes.fromhex(v["plain"])
    assert v["settings"] == 'compression none, algorithm aes-256-gcm, chunk size 32, key ID "k1"'
    assert sealed.object_key(key, salt).hex() == v["object key"]
    encoding = sealed.Encoding(compression="none", algorithm="aes-256-gcm", key_id="k1", key=key, chunk_bytes=32)
    encoder = sealed.Encoder(encoding, salt=salt)
    assert (encoder.write(plain) + encoder.finish()).hex() == v["stored"]
    assert decoded(bytes.fromhex(v["stored"]), {"k1": key}) == plain


def test_the_published_manifest_mac_is_what_the_code_writes_and_checks():
    v = published_vectors()
    key = bytes.fromhex(v["backup key"])
    document = json.loads(v["canonical"])
    assert manifest.mac_key(key).hex() == v["mac key"]
    assert manifest.canonical(document).decode() == v["canonical"]
    assert manifest.manifest_mac(key, v["manifest name"], document) == v["mac"]
    fields = {manifest.json_field_name(f.name): f.name for f in dataclasses.fields(manifest.Manifest)}
    record = manifest.Manifest(**{fields[k]: val for k, val in document.items() if k in fields})
    assert record.key == v["manifest name"]
    assert json.loads(record.to_json(key))["mac"] == v["mac"]


def test_objects_of_format_version_1_still_decode():
    stored_v1 = bytes.fromhex(V1_FIXTURE.read_text().strip())  # written by the version 1 encoder
    plain = b"etcd-operator sealed format version 1 fixture: " + b"0123456789abcdef" * 8
    header = sealed.Header.parse(stored_v1)
    assert header is not None and (header.version, header.random.hex()) == (1, "0011223344556677")
    assert decoded(stored_v1, {"k1": KEY}) == plain
    assert run(reader_for(stored_v1, {"k1": KEY}).read(40, 30)) == plain[40:70]
    with pytest.raises(sealed.DecryptionFailed):
        decoded(stored_v1, {"k1": OTHER_KEY})


def test_version_2_is_what_is_written_and_an_unknown_version_is_refused():
    blob = bytearray(stored(ENCRYPTED))
    assert blob[len(sealed.MAGIC)] == 2
    blob[len(sealed.MAGIC)] = 3
    with pytest.raises(sealed.SealedError, match="version 3 is not supported"):
        decoded(bytes(blob), {"k1": KEY})


def test_a_version_2_record_does_not_open_under_the_backup_key_itself():
    """The records are sealed under the object's derived key: the backup key alone opens nothing."""
    blob = stored(ENCRYPTED)
    header = sealed.Header.parse(blob)
    assert header is not None
    offset, length = records(blob)[0]
    payload = blob[offset + sealed.RECORD_HEAD_BYTES : offset + length]
    aad = header.raw + sealed.DATA + (0).to_bytes(8, "big")
    with pytest.raises(InvalidTag):
        AESGCM(KEY).decrypt((0).to_bytes(12, "big"), payload, aad)
    AESGCM(sealed.object_key(KEY, header.random)).decrypt((0).to_bytes(12, "big"), payload, aad)


# --- a reader with keys reads only what is encrypted under them ----------------------------


@pytest.mark.parametrize(
    "blob",
    [DATA, b"abc", stored(COMPRESSED), stored(sealed.Encoding(compression="none", algorithm="none"), DATA)],
    ids=["plain", "plain-shorter-than-the-magic", "sealed-compressed-only", "plain-via-encode"],
)
def test_a_reader_with_keys_refuses_an_object_not_encrypted(blob):
    with pytest.raises(sealed.PlaintextRefused) as refused:
        decoded(blob, {"k1": KEY})
    assert refused.value.reason == "PlaintextRefused"
    if len(blob) >= sealed.MAX_HEADER_BYTES:
        with pytest.raises(sealed.PlaintextRefused):
            reader_for(blob, {"k1": KEY})
    assert decoded(blob) == (b"abc" if blob == b"abc" else DATA)  # without keys: as before
