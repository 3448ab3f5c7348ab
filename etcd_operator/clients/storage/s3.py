"""S3 access for backups and restores. boto3 is synchronous, so every call runs in this
storage's own worker threads; the event loop never waits on the network here, and one
busy upload cannot starve the threads others need.

boto3 and botocore are imported by the first S3Storage (or the first error to classify),
not with this module: about 8 MiB of resident memory on top of the operator's other
imports, which an operator that never backs up or restores should not carry (docs/benchmarks.md, "The
scale benchmark")."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import datetime
import email.utils
import functools
import tempfile
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from etcd_operator.core.backup.object_lock import Lock, StoredObject, StoredVersion, UploadLock
from etcd_operator.core.leadership_fence import LeadershipLost, permit_write

if TYPE_CHECKING:
    import boto3

PERMANENT_CODES = frozenset(
    {
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "NoSuchBucket",
        "InvalidBucketName",
        "AllAccessDisabled",
        "AuthorizationHeaderMalformed",
        "InvalidToken",
        "ExpiredToken",
        "AccountProblem",
        "PermanentRedirect",
        "InvalidRequest",
    }
)


BODY_CHECKSUM = "CRC32"
PART_CHECKSUM_FIELD = "ChecksumCRC32"


# Calls that change the store: a replica that lost its lease sends none of them.
WRITES = frozenset(
    {"put_object", "delete_object", "create_multipart_upload", "complete_multipart_upload", "abort_multipart_upload"}
)
# The same calls as botocore names them in its events: each attempt (retries included) asks
# the fence again just before it is sent, from the worker thread, so a write still in a
# thread when the right to act ends, or when its storage was closed, is never sent.
_WRITE_OPERATIONS = (
    "PutObject",
    "DeleteObject",
    "CreateMultipartUpload",
    "CompleteMultipartUpload",
    "AbortMultipartUpload",
    "UploadPart",
)


class StorageError(Exception):
    """An S3 call failed. `permanent` errors will not heal by retrying (credentials, bucket)."""

    def __init__(self, message: str, code: str = "", permanent: bool = False):
        super().__init__(message)
        self.code = code
        self.permanent = permanent


class StorageClosed(StorageError):
    """A write of a closed S3Storage was about to be sent (see S3Storage.close)."""

    def __init__(self, message: str):
        super().__init__(message, "StorageClosed", permanent=True)


class ObjectExists(StorageError):
    """A create-only PUT (`put(..., create_only=True)`) found an object under its key."""


PRECONDITION_FAILED = "PreconditionFailed"


def classify(error: Exception) -> StorageError:
    if isinstance(error, StorageError):
        return error
    from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "")
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        if code == PRECONDITION_FAILED or status == 412:
            return ObjectExists(f"{PRECONDITION_FAILED}: an object is stored under that key already", code, True)
        permanent = code in PERMANENT_CODES or (400 <= status < 500 and code not in ("RequestTimeout", "SlowDown"))
        message = error.response.get("Error", {}).get("Message", "") or code
        return StorageError(f"{code}: {message}", code, permanent)
    if isinstance(error, EndpointConnectionError):
        return StorageError(f"cannot reach the S3 endpoint: {error}", "EndpointUnreachable")
    if isinstance(error, BotoCoreError):
        return StorageError(str(error), type(error).__name__)
    return StorageError(str(error), type(error).__name__)


@dataclasses.dataclass(frozen=True)
class S3Location:
    """Where and how to reach a bucket. `secret_key` is never logged or reported."""

    bucket: str
    endpoint: str | None = None
    region: str | None = None
    force_path_style: bool = False
    access_key: str | None = dataclasses.field(default=None, repr=False)
    secret_key: str | None = dataclasses.field(default=None, repr=False)
    ca_bundle: bytes | None = dataclasses.field(default=None, repr=False)
    insecure: bool = False  # an http:// endpoint was explicitly allowed
    encryption: str | None = None  # SSE_S3 or SSE_KMS
    kms_key_id: str | None = None
    object_lock: UploadLock | None = None  # a retention set on each object uploaded

    @classmethod
    def from_pod_env(cls, env: Mapping[str, str], ca: bytes | None) -> S3Location:
        """Read inside the operator's one-shot pods (restore, verification, replay), whose
        variables core/seed_containers.py `fetch_env` sets."""
        return cls(
            bucket=env["S3_BUCKET"],
            endpoint=env.get("S3_ENDPOINT") or None,
            region=env.get("S3_REGION") or None,
            force_path_style=env.get("S3_FORCE_PATH_STYLE") == "true",
            access_key=env.get("AWS_ACCESS_KEY_ID") or None,
            secret_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
            ca_bundle=ca,
            insecure=env.get("S3_INSECURE") == "true",
        )

    @property
    def over_http(self) -> bool:
        return self.endpoint is not None and self.endpoint.lower().startswith("http://")


SSE_S3 = "SSE-S3"
SSE_KMS = "SSE-KMS"


def encryption_arguments(location: S3Location) -> dict[str, str]:
    """The request fields that ask the store to encrypt a new object at rest."""
    if location.encryption == SSE_S3:
        return {"ServerSideEncryption": "AES256"}
    if location.encryption == SSE_KMS:
        return {
            "ServerSideEncryption": "aws:kms",
            **({"SSEKMSKeyId": location.kms_key_id} if location.kms_key_id else {}),
        }
    if location.encryption:
        raise StorageError(
            f"unknown server-side encryption mode {location.encryption!r}", "InvalidEncryption", permanent=True
        )
    return {}


def lock_arguments(lock: UploadLock | None, now: datetime.datetime) -> dict[str, Any]:
    """The request fields that set an Object Lock retention on a new object, from `now`. The
    store refuses them for a bucket without Object Lock (InvalidRequest, permanent)."""
    if lock is None:
        return {}
    return {"ObjectLockMode": lock.mode, "ObjectLockRetainUntilDate": lock.retain_until(now)}


def signs_payload(location: S3Location) -> bool:
    """Over https, TLS protects the body and the CRC32 checks it; over http a man in the
    middle could rewrite body and checksum together, so the SigV4 signature covers the body."""
    return location.over_http


def body_checksum(location: S3Location) -> dict[str, str]:
    """The store checks every body on receipt, by one hash: the signed payload's sha256, or
    else a CRC32 checksum. Both on one body would cost the client and the store a pass each
    (about 0.3 CPU s per GiB on each side) for nothing."""
    return {} if signs_payload(location) else {"ChecksumAlgorithm": BODY_CHECKSUM}


_SESSION_LOCK = threading.Lock()
_SHARED_SESSION: boto3.session.Session | None = None


def _shared_session() -> boto3.session.Session:
    """One boto3 session for the process, so service models are parsed once and not per
    client. Call with _SESSION_LOCK held: sessions are not thread-safe."""
    global _SHARED_SESSION
    if _SHARED_SESSION is None:
        import boto3.session

        _SHARED_SESSION = boto3.session.Session()
    return _SHARED_SESSION


class S3Storage:
    def __init__(self, location: S3Location, max_pool: int = 10):
        if location.over_http and not location.insecure:
            raise StorageError(
                f"endpoint {location.endpoint} is plain http; set insecure: true to allow it",
                "InsecureEndpoint",
                permanent=True,
            )
        self._encryption = encryption_arguments(location)
        self._checksum = body_checksum(location)
        self.location = location
        self.bucket = location.bucket
        self._threads = concurrent.futures.ThreadPoolExecutor(max_pool, thread_name_prefix="s3")
        self._ca_file = None
        verify: Any = None
        if location.ca_bundle:
            self._ca_file = tempfile.NamedTemporaryFile(prefix="s3-ca-", suffix=".pem")
            self._ca_file.write(location.ca_bundle)
            self._ca_file.flush()
            verify = self._ca_file.name
        from botocore.config import Config

        config = Config(
            # Over https, bodies carry a CRC32 the store verifies instead of a SigV4 payload
            # hash: the same transit check for a fraction of the CPU (docs/operations/backup.md,
            # "The data path"). Over http the signature covers the payload.
            s3={
                "addressing_style": "path" if location.force_path_style else "auto",
                "payload_signing_enabled": signs_payload(location),
            },
            retries={"max_attempts": 3, "mode": "standard"},
            connect_timeout=5,
            read_timeout=60,
            max_pool_connections=max_pool,
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        with _SESSION_LOCK:
            self._client = _shared_session().client(
                "s3",
                endpoint_url=location.endpoint or None,
                region_name=location.region or "us-east-1",
                aws_access_key_id=location.access_key,
                aws_secret_access_key=location.secret_key,
                verify=verify,
                config=config,
            )
        self._closed = threading.Event()
        for operation in _WRITE_OPERATIONS:
            self._client.meta.events.register(f"before-send.s3.{operation}", self._before_sending_a_write)

    def _before_sending_a_write(self, request: Any, **_: Any) -> None:
        """Runs in the worker thread right before each attempt of a write goes on the wire."""
        what = f"S3 {request.method} {request.url.split('?', 1)[0].rsplit('/', 1)[-1]}"
        if self._closed.is_set():
            raise StorageClosed(f"refused {what}: its storage was closed (the writer stopped)")
        permit_write(what)

    def refuse_writes(self) -> None:
        """No write of this storage is sent after this returns, even one still in a thread
        (a request already on the wire is not called back). Never blocks."""
        self._closed.set()

    def close(self) -> None:
        self.refuse_writes()
        self._threads.shutdown(wait=False, cancel_futures=True)
        self._client.close()
        if self._ca_file:
            self._ca_file.close()

    async def _in_thread(self, function, *args, **kwargs) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, functools.partial(function, *args, **kwargs))

    async def _call(self, method: str, **kwargs) -> Any:
        if method in WRITES:
            permit_write(f"S3 {method} {kwargs.get('Key', '')}")
        try:
            return await self._in_thread(getattr(self._client, method), **kwargs)
        except LeadershipLost:
            raise  # from the check before sending (_before_sending_a_write)
        except Exception as e:
            raise classify(e) from None

    def _lock(self) -> dict[str, Any]:
        return lock_arguments(self.location.object_lock, datetime.datetime.now(datetime.UTC))

    async def check_bucket(self) -> None:
        """A listing, not HEAD: its error body tells bad credentials from a missing bucket."""
        await self._call("list_objects_v2", Bucket=self.bucket, MaxKeys=1)

    async def put(
        self, key: str, body: bytes, content_type: str = "application/octet-stream", create_only: bool = False
    ) -> None:
        """`create_only`: the store writes it only if no object is under `key` (If-None-Match: *),
        atomically; else ObjectExists, and the stored object is left as it was."""
        await self._call(
            "put_object",
            Bucket=self.bucket,
            Key=key,
            Body=body,
            ContentType=content_type,
            **({"IfNoneMatch": "*"} if create_only else {}),
            **self._checksum,
            **self._encryption,
            **self._lock(),
        )

    async def get(self, key: str) -> bytes:
        response = await self._call("get_object", Bucket=self.bucket, Key=key)
        return await self._in_thread(response["Body"].read)

    async def read_range(self, key: str, offset: int, length: int) -> bytes:
        response = await self._call(
            "get_object", Bucket=self.bucket, Key=key, Range=f"bytes={offset}-{offset + length - 1}"
        )
        return await self._in_thread(response["Body"].read)

    async def exists(self, key: str) -> bool:
        try:
            await self._call("head_object", Bucket=self.bucket, Key=key)
        except StorageError as e:
            if e.code in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
        return True

    async def size(self, key: str) -> int:
        return (await self._call("head_object", Bucket=self.bucket, Key=key))["ContentLength"]

    async def _listed(self, operation: str, field: str, prefix: str) -> tuple[list[dict], datetime.datetime | None]:
        """Every item of `field` on every page `operation` lists for `prefix`, and the store's
        own time when it answered (its Date header; None without one)."""

        def collect():
            items, store_now = [], None
            for page in self._client.get_paginator(operation).paginate(Bucket=self.bucket, Prefix=prefix):
                items += page.get(field, [])
                store_now = _store_time(page) or store_now
            return items, store_now

        try:
            return await self._in_thread(collect)
        except Exception as e:
            raise classify(e) from None

    async def list_keys(self, prefix: str) -> list[str]:
        objects, _ = await self._listed("list_objects_v2", "Contents", prefix)
        return [o["Key"] for o in objects]

    async def list_modified(self, prefix: str) -> tuple[dict[str, datetime.datetime], datetime.datetime | None]:
        """Each key's LastModified under `prefix`, and the store's own time when it answered
        (its Date header; None without one): two times from the store's one clock."""
        objects, store_now = await self._listed("list_objects_v2", "Contents", prefix)
        return {o["Key"]: o["LastModified"] for o in objects}, store_now

    async def delete(self, key: str, version_id: str | None = None) -> None:
        """Deletes `key`, or exactly its version `version_id`. In a bucket that keeps
        versions, a DELETE without one only adds a delete marker: the data stays."""
        version = {"VersionId": version_id} if version_id is not None else {}
        await self._call("delete_object", Bucket=self.bucket, Key=key, **version)

    async def stored(self, key: str) -> StoredObject:
        """Every version the store holds under `key` with its Object Lock, and the store's
        time (see core/backup/object_lock.py). A bucket without versions: one HEAD. With
        versions (Object Lock needs them): the key's versions and delete markers as listed,
        each version's lock from a HEAD of it. The lock headers come back only to a caller
        allowed s3:GetObjectRetention and s3:GetObjectLegalHold (docs/operations/backup.md,
        "Immutable buckets")."""
        head, delete_marker = await self._head(key)
        if head is None and not delete_marker:
            return StoredObject(key)
        if head is not None and head.get("VersionId") is None:
            return StoredObject(key, (StoredVersion(None, _lock(head)),), _store_time(head))
        listed, store_now = await self._versions_of(key)
        versions = []
        for version_id, is_marker in listed:
            if is_marker:  # a delete marker holds no data and no lock
                versions.append(StoredVersion(version_id))
                continue
            version, _ = await self._head(key, version_id)
            if version is None:
                continue  # deleted since it was listed
            versions.append(StoredVersion(version_id, _lock(version)))
            store_now = _earlier(store_now, _store_time(version))
        return StoredObject(key, tuple(versions), store_now)

    async def _head(self, key: str, version_id: str | None = None) -> tuple[dict | None, bool]:
        """The HEAD response, or None when nothing is there; and whether a delete marker
        hides the key (versions may remain under it)."""
        from botocore.exceptions import ClientError

        version = {"VersionId": version_id} if version_id is not None else {}

        def head():
            try:
                return self._client.head_object(Bucket=self.bucket, Key=key, **version), False
            except ClientError as e:
                if e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") != 404:
                    raise
                headers = e.response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
                return None, headers.get("x-amz-delete-marker") == "true"

        try:
            return await self._in_thread(head)
        except Exception as e:
            raise classify(e) from None

    async def _versions_of(self, key: str) -> tuple[list[tuple[str, bool]], datetime.datetime | None]:
        """(version ID, is a delete marker) of exactly `key`, and the store's time."""

        def collect():
            found, store_now = [], None
            for page in self._client.get_paginator("list_object_versions").paginate(Bucket=self.bucket, Prefix=key):
                found += [(v["VersionId"], False) for v in page.get("Versions", []) if v["Key"] == key]
                found += [(m["VersionId"], True) for m in page.get("DeleteMarkers", []) if m["Key"] == key]
                store_now = _earlier(store_now, _store_time(page))
            return found, store_now

        try:
            return await self._in_thread(collect)
        except Exception as e:
            raise classify(e) from None

    async def open_stream(self, key: str, chunk_size: int = 1 << 20):
        """An async iterator over the object's bytes, read in a worker thread chunk by chunk."""
        response = await self._call("get_object", Bucket=self.bucket, Key=key)
        body = response["Body"]

        async def chunks():
            try:
                while True:
                    try:
                        chunk = await self._in_thread(body.read, chunk_size)
                    except Exception as e:
                        raise classify(e) from None
                    if not chunk:
                        return
                    yield chunk
            finally:
                await self._in_thread(body.close)

        return chunks()

    # --- multipart ---------------------------------------------------------------------

    async def start_multipart(self, key: str) -> str:
        response = await self._call(
            "create_multipart_upload",
            Bucket=self.bucket,
            Key=key,
            ContentType="application/octet-stream",
            **self._checksum,
            **self._encryption,
            **self._lock(),
        )
        return response["UploadId"]

    async def upload_part(self, key: str, upload_id: str, number: int, data: bytes | bytearray) -> dict[str, str]:
        """Returns the part's entry for `complete_multipart`."""
        response = await self._call(
            "upload_part",
            Bucket=self.bucket,
            Key=key,
            UploadId=upload_id,
            PartNumber=number,
            Body=data,
            **self._checksum,
        )
        part = {"PartNumber": number, "ETag": response["ETag"]}
        if response.get(PART_CHECKSUM_FIELD):  # stores without flexible checksums leave it out
            part[PART_CHECKSUM_FIELD] = response[PART_CHECKSUM_FIELD]
        return part

    async def complete_multipart(self, key: str, upload_id: str, parts: list[dict[str, str]]) -> None:
        await self._call(
            "complete_multipart_upload",
            Bucket=self.bucket,
            Key=key,
            UploadId=upload_id,
            MultipartUpload={"Parts": sorted(parts, key=lambda p: p["PartNumber"])},
        )

    async def abort_multipart(self, key: str, upload_id: str) -> None:
        await self._call("abort_multipart_upload", Bucket=self.bucket, Key=key, UploadId=upload_id)

    async def list_uploads(
        self, prefix: str
    ) -> tuple[list[tuple[str, str, datetime.datetime]], datetime.datetime | None]:
        """Unfinished multipart uploads (key, upload ID, initiated) the store lists for
        `prefix`, and the store's own time when it answered (None without a Date header).
        Stores differ in what `prefix` matches: AWS S3 and Ceph match a key prefix; MinIO
        matches an exact key, and lists without a prefix the uploads started since it started."""
        uploads, store_now = await self._listed("list_multipart_uploads", "Uploads", prefix)
        return [(u["Key"], u["UploadId"], u["Initiated"]) for u in uploads], store_now


def _lock(head: dict) -> Lock:
    until = head.get("ObjectLockRetainUntilDate")
    return Lock(
        mode=head.get("ObjectLockMode") or "",
        retain_until=until.astimezone(datetime.UTC) if until is not None else None,
        legal_hold=head.get("ObjectLockLegalHoldStatus") == "ON",
    )


def _earlier(a: datetime.datetime | None, b: datetime.datetime | None) -> datetime.datetime | None:
    """The earlier of two store times (the one that holds a lock longest); either if one is None."""
    if a is None or b is None:
        return a or b
    return min(a, b)


def _store_time(response: dict) -> datetime.datetime | None:
    date = (response.get("ResponseMetadata") or {}).get("HTTPHeaders", {}).get("date")
    try:
        return email.utils.parsedate_to_datetime(date) if date else None
    except (TypeError, ValueError):
        return None
