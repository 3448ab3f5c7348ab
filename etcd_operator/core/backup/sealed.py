"""The stored form of a snapshot (or any backup object): zstd-compressed and optionally
encrypted with AES-256-GCM, in independently sealed chunks, streamed both ways. Pure.

    header   MAGIC, version, compression, algorithm, chunk size, salt, key ID
    record*  kind (DATA), length, payload: one chunk of at most `chunk size` plain bytes,
             compressed (one zstd frame), then sealed
    record   kind (INDEX), length, payload: plain size, chunk count, each chunk's offset
    trailer  the index record's offset, END_MAGIC

Sealing (algorithm aes-256-gcm), version 2: each object has a key of its own,
HKDF-SHA256(backup key, salt = the header's 32 random bytes, info = OBJECT_KEY_INFO), and
each record's nonce is its counter (0, 1, ... as 12 big-endian bytes) under that key: no
nonce repeats within an object, and objects share no key but with odds of 2^-256 per pair.
Version 1 (read only) used the backup key itself with a random 64-bit nonce prefix per
object, which repeats too soon at a segment per second (~n²/2^65 for n objects). The
associated data of every record is the whole header, the record's kind and its counter: a
record moved, dropped, swapped between objects or relabelled fails authentication, and a
stream cut before its index record is refused as truncated. Without encryption the records
carry no tag; the manifest's sha256 of the stored bytes is what detects tampering then.
docs/reference/sealed-format.md publishes the layout with test vectors.

A reader that holds keys (the backup has a key) accepts only objects encrypted under one of
them: a plain object, or a sealed one without encryption, is refused as PlaintextRefused,
since anyone who can write the bucket could have put it there. Without keys, objects that
do not start with MAGIC (snapshots written before this format) pass through unchanged.

Memory: the encoder holds one chunk of plain bytes and its compressed form; the decoder one
record and its plain chunk."""

from __future__ import annotations

import dataclasses
import os
import struct
from collections.abc import Iterable, Iterator, Mapping

import zstandard
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

MAGIC = b"\x89EOSEAL"  # a bbolt file starts with page id 0 (zero bytes): never this
END_MAGIC = b"EOSEALZ\n"
VERSION = 2  # what this operator writes
READABLE_VERSIONS = (1, 2)
COMPRESSIONS = ("none", "zstd")
ALGORITHMS = ("none", "aes-256-gcm")
DEFAULT_CHUNK_BYTES = 1 << 20
MAX_CHUNK_BYTES = 16 << 20
KEY_BYTES = 32
NONCE_PREFIX_BYTES = 8  # version 1
SALT_BYTES = 32  # version 2
NONCE_BYTES = 12
OBJECT_KEY_INFO = b"etcd-operator sealed object key v2"
TAG_BYTES = 16
MAX_KEY_ID_BYTES = 253  # a Secret data key
ZSTD_LEVEL = 3
ZSTD_CONTEXT_BYTES = 2 << 20  # a level-3 compression context, rounded up

DATA, INDEX = b"D", b"I"
_RECORD = struct.Struct(">cI")  # kind, payload length
RECORD_HEAD_BYTES = _RECORD.size
_VERSIONED = struct.Struct(f">{len(MAGIC)}sB")  # how every version starts
_FIXED_HEADERS = {  # by version: magic, version, compression, algorithm, chunk size, random bytes, key ID length
    1: struct.Struct(f">{len(MAGIC)}sBBBI{NONCE_PREFIX_BYTES}sB"),
    2: struct.Struct(f">{len(MAGIC)}sBBBI{SALT_BYTES}sB"),
}
_TRAILER = struct.Struct(f">Q{len(END_MAGIC)}s")
_INDEX_HEAD = struct.Struct(">QI")  # plain size, chunk count
TRAILER_BYTES = _TRAILER.size
MAX_HEADER_BYTES = max(h.size for h in _FIXED_HEADERS.values()) + MAX_KEY_ID_BYTES


class SealedError(ValueError):
    """The stored bytes cannot be turned back into the plain ones. `reason` is a condition
    reason: SnapshotCorrupt, EncryptionKeyMissing, DecryptionFailed or PlaintextRefused.
    Messages never hold key material."""

    reason = "SnapshotCorrupt"


class KeyMissing(SealedError):
    reason = "EncryptionKeyMissing"


class DecryptionFailed(SealedError):
    reason = "DecryptionFailed"


class PlaintextRefused(SealedError):
    """The reader holds keys, and the object is not encrypted: a substitute, refused."""

    reason = "PlaintextRefused"


def plaintext_refusal(sealed_at_all: bool) -> PlaintextRefused:
    what = "sealed without encryption" if sealed_at_all else "not sealed (plain bytes)"
    return PlaintextRefused(
        f"the object is {what}, while the backup has a key: every object of an encrypted backup is encrypted "
        f"under one of its keys, so this one was put there by someone else, and is refused"
    )


@dataclasses.dataclass(frozen=True)
class Encoding:
    """How to store an object. `key`: 32 bytes when `algorithm` is aes-256-gcm."""

    compression: str = "zstd"
    algorithm: str = "none"
    key_id: str = ""
    key: bytes = dataclasses.field(default=b"", repr=False)
    chunk_bytes: int = DEFAULT_CHUNK_BYTES

    def __post_init__(self) -> None:
        if self.compression not in COMPRESSIONS:
            raise ValueError(f"compression {self.compression!r} is not one of {', '.join(COMPRESSIONS)}")
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm {self.algorithm!r} is not one of {', '.join(ALGORITHMS)}")
        if self.encrypted and (len(self.key) != KEY_BYTES or not self.key_id):
            raise ValueError(f"aes-256-gcm needs a key ID and a key of {KEY_BYTES} bytes")
        if len(self.key_id.encode()) > MAX_KEY_ID_BYTES:
            raise ValueError(f"a key ID has at most {MAX_KEY_ID_BYTES} bytes")
        if not 0 < self.chunk_bytes <= MAX_CHUNK_BYTES:
            raise ValueError(f"chunk size must be in 1..{MAX_CHUNK_BYTES}")

    @property
    def encrypted(self) -> bool:
        return self.algorithm != "none"

    @property
    def sealed(self) -> bool:
        """Whether objects are stored in this format at all: plain and unencrypted ones are
        stored as they are, as before the format existed."""
        return self.compression != "none" or self.encrypted

    @property
    def signing_key(self) -> bytes | None:
        """The key the manifests of objects stored this way are authenticated with
        (core/backup/manifest.py); None without encryption."""
        return self.key if self.encrypted else None

    @property
    def working_bytes(self) -> int:
        """What encoding one object holds at once, for the memory budget: the chunk being
        filled, its compressed and its sealed form, and zstd's context at ZSTD_LEVEL (about
        1.3 MB for 1 MiB chunks; estimated_compression_context_size)."""
        if not self.sealed:
            return 0
        return 3 * self.chunk_bytes + (ZSTD_CONTEXT_BYTES if self.compression == "zstd" else 0)


PLAIN = Encoding(compression="none")


@dataclasses.dataclass(frozen=True)
class Header:
    version: int
    compression: str
    algorithm: str
    chunk_bytes: int
    random: bytes  # version 1: the nonce prefix; version 2: the object key's salt
    key_id: str
    raw: bytes  # as stored: every record's associated data starts with it

    @classmethod
    def parse(cls, data: bytes | bytearray) -> Header | None:
        """The header at the start of `data`, or None when `data` is too short to hold it."""
        if len(data) < _VERSIONED.size:
            return None
        magic, version = _VERSIONED.unpack_from(data)
        if magic != MAGIC:
            raise SealedError("not a sealed object")
        fixed = _FIXED_HEADERS.get(version)
        if fixed is None:
            readable = ", ".join(map(str, READABLE_VERSIONS))
            raise SealedError(f"sealed format version {version} is not supported (this operator reads {readable})")
        if len(data) < fixed.size:
            return None
        _, _, compression, algorithm, chunk, random, id_len = fixed.unpack_from(data)
        if compression >= len(COMPRESSIONS) or algorithm >= len(ALGORITHMS) or not 0 < chunk <= MAX_CHUNK_BYTES:
            raise SealedError("the sealed header names an unknown compression, algorithm or chunk size")
        end = fixed.size + id_len
        if len(data) < end:
            return None
        try:
            key_id = data[fixed.size : end].decode()
        except UnicodeDecodeError:
            raise SealedError("the sealed header's key ID is not UTF-8") from None
        return cls(version, COMPRESSIONS[compression], ALGORITHMS[algorithm], chunk, random, key_id, bytes(data[:end]))

    @property
    def encrypted(self) -> bool:
        return self.algorithm != "none"

    @property
    def max_record_bytes(self) -> int:
        """A bound on any record's payload: zstd's worst case for one chunk, the tag, or the index."""
        return max(self.chunk_bytes + self.chunk_bytes // 64 + 1024, _INDEX_HEAD.size + 8 * (1 << 20)) + TAG_BYTES


def is_sealed(prefix: bytes | bytearray) -> bool:
    """Whether an object starting with `prefix` (at least len(MAGIC) bytes) is in this format."""
    return bytes(prefix[: len(MAGIC)]) == MAGIC


def _header_bytes(encoding: Encoding, salt: bytes) -> bytes:
    key_id = encoding.key_id.encode()
    fixed = _FIXED_HEADERS[VERSION].pack(
        MAGIC,
        VERSION,
        COMPRESSIONS.index(encoding.compression),
        ALGORITHMS.index(encoding.algorithm),
        encoding.chunk_bytes,
        salt,
        len(key_id),
    )
    return fixed + key_id


def object_key(backup_key: bytes, salt: bytes) -> bytes:
    """Version 2: the key one object's records are sealed under."""
    return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=salt, info=OBJECT_KEY_INFO).derive(backup_key)


class _Sealer:
    """Seals and opens the records of one object (one header, one key)."""

    def __init__(self, header: Header, key: bytes | None):
        self.header = header
        self.aead = None
        if header.encrypted and key is not None:
            self.aead = AESGCM(object_key(key, header.random) if header.version >= 2 else key)

    def _nonce_and_aad(self, kind: bytes, counter: int) -> tuple[bytes, bytes]:
        if counter >= 1 << 32:
            raise SealedError("more than 2^32 records in one object")
        if self.header.version >= 2:
            nonce = counter.to_bytes(NONCE_BYTES, "big")
        else:
            nonce = self.header.random + struct.pack(">I", counter)
        return nonce, self.header.raw + kind + struct.pack(">Q", counter)

    def seal(self, kind: bytes, counter: int, payload: bytes) -> bytes:
        if self.aead is None:
            return payload
        nonce, aad = self._nonce_and_aad(kind, counter)
        return self.aead.encrypt(nonce, payload, aad)

    def open(self, kind: bytes, counter: int, payload: bytes) -> bytes:
        if not self.header.encrypted:
            return payload
        if self.aead is None:
            raise KeyMissing(f"no key {self.header.key_id!r} to decrypt with")
        nonce, aad = self._nonce_and_aad(kind, counter)
        try:
            return self.aead.decrypt(nonce, payload, aad)
        except InvalidTag:
            raise DecryptionFailed(
                f"record {counter} does not authenticate under key {self.header.key_id!r}: the key is "
                f"wrong (another key under this ID), or the object was altered, reordered or cut"
            ) from None


def _pick_key(header: Header, keys: Mapping[str, bytes]) -> bytes | None:
    if not header.encrypted:
        return None
    key = keys.get(header.key_id)
    if key is None:
        listed = ", ".join(sorted(keys)) or "none"
        raise KeyMissing(
            f"the object is encrypted under key ID {header.key_id!r}, which the given keys do not hold "
            f"(key IDs given: {listed})"
        )
    return key


def _index_payload(plain_size: int, offsets: list[int]) -> bytes:
    return _INDEX_HEAD.pack(plain_size, len(offsets)) + struct.pack(f">{len(offsets)}Q", *offsets)


@dataclasses.dataclass(frozen=True)
class Index:
    plain_size: int
    offsets: tuple[int, ...]  # each data record's offset in the stored object

    @classmethod
    def parse(cls, payload: bytes) -> Index:
        if len(payload) < _INDEX_HEAD.size:
            raise SealedError("the index record is too short")
        plain_size, count = _INDEX_HEAD.unpack_from(payload)
        if len(payload) != _INDEX_HEAD.size + 8 * count:
            raise SealedError("the index record's length does not match its chunk count")
        return cls(plain_size, struct.unpack_from(f">{count}Q", payload, _INDEX_HEAD.size))


class Encoder:
    """Push-style: `write` plain bytes, get stored bytes back; `finish` once, at the end.
    Writes VERSION. `salt`: for test vectors only; a fresh random one otherwise."""

    def __init__(self, encoding: Encoding, salt: bytes | None = None):
        self.encoding = encoding
        if salt is not None and len(salt) != SALT_BYTES:
            raise ValueError(f"a salt has {SALT_BYTES} bytes")
        salt = salt if salt is not None else os.urandom(SALT_BYTES)
        raw = _header_bytes(encoding, salt if encoding.encrypted else bytes(SALT_BYTES))
        header = Header.parse(raw)
        assert header is not None
        self._sealer = _Sealer(header, encoding.key if encoding.encrypted else None)
        self._compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL) if encoding.compression == "zstd" else None
        self._pending = bytearray()
        self._offsets: list[int] = []
        self._stored = 0
        self.plain_size = 0
        self._started = False
        self._finished = False

    def write(self, data: bytes | bytearray | memoryview) -> bytes:
        if self._finished:
            raise RuntimeError("write after finish")
        out = [self._start()]
        self.plain_size += len(data)
        self._pending += data
        chunk = self.encoding.chunk_bytes
        while len(self._pending) >= chunk:
            out.append(self._record(DATA, bytes(self._pending[:chunk])))
            del self._pending[:chunk]
        return b"".join(out)

    def finish(self) -> bytes:
        if self._finished:
            raise RuntimeError("finish twice")
        out = [self._start()]
        if self._pending:
            out.append(self._record(DATA, bytes(self._pending)))
            self._pending.clear()
        self._finished = True
        index_offset = self._stored
        counter = len(self._offsets)
        payload = self._sealer.seal(INDEX, counter, _index_payload(self.plain_size, self._offsets))
        out.append(_RECORD.pack(INDEX, len(payload)) + payload)
        out.append(_TRAILER.pack(index_offset, END_MAGIC))
        return b"".join(out)

    def _start(self) -> bytes:
        if self._started:
            return b""
        self._started = True
        self._stored = len(self._sealer.header.raw)
        return self._sealer.header.raw

    def _record(self, kind: bytes, plain: bytes) -> bytes:
        counter = len(self._offsets)
        body = self._compressor.compress(plain) if self._compressor is not None else plain
        payload = self._sealer.seal(kind, counter, body)
        self._offsets.append(self._stored)
        record = _RECORD.pack(kind, len(payload)) + payload
        self._stored += len(record)
        return record


def _decompress(header: Header, body: bytes) -> bytes:
    if header.compression == "none":
        return body
    try:
        plain = zstandard.ZstdDecompressor().decompress(body, max_output_size=header.chunk_bytes)
    except zstandard.ZstdError as e:
        raise SealedError(f"a chunk does not decompress: {e}") from None
    if len(plain) > header.chunk_bytes:
        raise SealedError("a chunk decompresses to more than the chunk size")
    return plain


# --- random access (sealed_reader.py) ----------------------------------------------------


def key_for(header: Header, keys: Mapping[str, bytes]) -> bytes | None:
    """The key of `header`'s key ID among `keys` (None when the object is not encrypted)."""
    return _pick_key(header, keys)


def record_head(data: bytes) -> tuple[bytes, int]:
    """(kind, payload length) of the record starting `data`."""
    if len(data) < RECORD_HEAD_BYTES:
        raise SealedError("a record is cut short")
    kind, length = _RECORD.unpack_from(data)
    return kind, length


def trailer_offset(trailer: bytes) -> int:
    """The index record's offset, from the object's last TRAILER_BYTES."""
    index_offset, end = _TRAILER.unpack(trailer)
    if end != END_MAGIC:
        raise SealedError("the object has no valid trailer: it was cut short or altered")
    return int(index_offset)


def open_index(header: Header, key: bytes | None, payload: bytes) -> Index:
    """The index record's contents. Its counter (and nonce) is the chunk count, which its
    length tells: an index that does not fit the records fails authentication."""
    sealed_bytes = len(payload) - (TAG_BYTES if header.encrypted else 0)
    count = (sealed_bytes - _INDEX_HEAD.size) // 8
    if count < 0:
        raise SealedError("the index record is too short")
    return Index.parse(_Sealer(header, key).open(INDEX, count, payload))


def open_data(header: Header, key: bytes | None, counter: int, payload: bytes) -> bytes:
    """The plain bytes of data record number `counter`."""
    return _decompress(header, _Sealer(header, key).open(DATA, counter, payload))


class Decoder:
    """Push-style: `feed` stored bytes, get plain bytes back; `finish` at the end raises if
    the object was cut short. `keys`: key ID -> key, every one a candidate. With keys, an
    object not encrypted under one of them is refused (PlaintextRefused); without, an object
    not in this format is passed through as it is (`sealed` stays False)."""

    def __init__(self, keys: Mapping[str, bytes] | None = None):
        self.keys = dict(keys or {})
        self.encrypted_only = bool(self.keys)
        self.header: Header | None = None
        self.sealed: bool | None = None  # None until the first bytes tell
        self._sealer: _Sealer | None = None
        self._buffer = bytearray()
        self._counter = 0
        self._stored = 0  # offset in the stored object of _buffer's first byte
        self._offsets: list[int] = []
        self.plain_size = 0
        self._index: Index | None = None
        self._index_offset = 0
        self._trailer_seen = False

    def feed(self, data: bytes | bytearray | memoryview) -> bytes:
        if self.sealed is False:
            self.plain_size += len(data)
            return bytes(data)
        self._buffer += data
        if self.sealed is None:
            if len(self._buffer) < len(MAGIC):
                return b""
            self.sealed = is_sealed(self._buffer)
            if not self.sealed and self.encrypted_only:
                raise plaintext_refusal(False)
            if not self.sealed:
                out = bytes(self._buffer)
                self._buffer.clear()
                self.plain_size += len(out)
                return out
        if self.header is None:
            header = Header.parse(self._buffer)
            if header is None:
                return b""
            if self.encrypted_only and not header.encrypted:
                raise plaintext_refusal(True)
            self.header = header
            self._sealer = _Sealer(header, _pick_key(header, self.keys))
            self._consume(len(header.raw))
        return self._records()

    def finish(self) -> bytes:
        """The plain bytes still held (only ever for a plain object shorter than MAGIC)."""
        if self.sealed is False:
            return b""
        if self.sealed is None:
            if self._buffer:
                if self.encrypted_only:
                    raise plaintext_refusal(False)
                self.sealed = False  # shorter than MAGIC: a (tiny) plain object
                self.plain_size = len(self._buffer)
                return self._consume(len(self._buffer))
            raise SealedError("the object is empty")
        if not self._trailer_seen:
            raise SealedError("the object ends before its index record and trailer: it was cut short")
        return b""

    def _consume(self, n: int) -> bytes:
        taken = bytes(self._buffer[:n])
        del self._buffer[:n]
        self._stored += n
        return taken

    def _records(self) -> bytes:
        header, sealer = self.header, self._sealer
        assert header is not None and sealer is not None
        out = []
        while True:
            if self._trailer_seen:
                if self._buffer:
                    raise SealedError("bytes follow the trailer")
                break
            if self._index is not None:
                if len(self._buffer) < TRAILER_BYTES:
                    break
                index_offset, end = _TRAILER.unpack(self._consume(TRAILER_BYTES))
                if end != END_MAGIC or index_offset != self._index_offset:
                    raise SealedError("the trailer does not point at the index record")
                self._trailer_seen = True
                continue
            if len(self._buffer) < _RECORD.size:
                break
            kind, length = _RECORD.unpack_from(self._buffer)
            if kind not in (DATA, INDEX) or length > header.max_record_bytes:
                raise SealedError(f"record {self._counter} has an unknown kind or an impossible length")
            if len(self._buffer) < _RECORD.size + length:
                break
            offset = self._stored
            self._consume(_RECORD.size)
            payload = sealer.open(kind, self._counter, self._consume(length))
            if kind == DATA:
                plain = _decompress(header, payload)
                if not plain:
                    raise SealedError(f"record {self._counter} is empty")
                self._offsets.append(offset)
                self.plain_size += len(plain)
                out.append(plain)
                self._counter += 1
            else:
                index = Index.parse(payload)
                if index.offsets != tuple(self._offsets) or index.plain_size != self.plain_size:
                    raise SealedError("the index does not match the records read: records were dropped or moved")
                self._index, self._index_offset = index, offset
        return b"".join(out)


def encode(chunks: Iterable[bytes], encoding: Encoding) -> Iterator[bytes]:
    """The stored bytes of the plain `chunks`, as they come (empty pieces skipped). With
    an encoding that does not seal (compression none, no encryption), the chunks themselves."""
    if not encoding.sealed:
        yield from chunks
        return
    encoder = Encoder(encoding)
    for chunk in chunks:
        out = encoder.write(chunk)
        if out:
            yield out
    yield encoder.finish()


def decode(chunks: Iterable[bytes], keys: Mapping[str, bytes] | None = None) -> Iterator[bytes]:
    """The plain bytes of the stored `chunks`; raises SealedError (KeyMissing,
    DecryptionFailed, PlaintextRefused) when they cannot be trusted. Plain objects pass
    through only without keys."""
    decoder = Decoder(keys)
    for chunk in chunks:
        out = decoder.feed(chunk)
        if out:
            yield out
    rest = decoder.finish()
    if rest:
        yield rest
