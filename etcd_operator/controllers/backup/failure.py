"""Why an attempt at a backup run failed, and whether its cause may pass by itself: the
reason the status records, and what the status's retry decision (backup/backoff.py) reads."""

from __future__ import annotations

import asyncio

from etcd_operator.clients.etcd.client import EtcdError
from etcd_operator.clients.storage.s3 import StorageError
from etcd_operator.controllers.backup.source_candidates import SourceUnavailable
from etcd_operator.controllers.backup.stream import SnapshotCorrupt
from etcd_operator.core.backup.keyring import KeyringError
from etcd_operator.core.buffer_budget import BudgetTooSmall
from etcd_operator.core.leadership_fence import LeadershipLost

STORAGE_REASONS = {
    "NoSuchBucket": "BucketNotFound",
    "InvalidAccessKeyId": "InvalidCredentials",
    "SignatureDoesNotMatch": "InvalidCredentials",
    "AccessDenied": "AccessDenied",
    "SecretNotFound": "SecretNotFound",
    "SecretKeyNotFound": "CredentialsNotFound",
    "CredentialKeyRefused": "CredentialsRefused",
    "InsecureEndpoint": "InsecureEndpoint",
}


class BackupFailed(Exception):
    def __init__(self, reason: str, message: str, permanent: bool):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.permanent = permanent


def as_failure(error: Exception) -> BackupFailed:
    """The reason for a failed attempt, and whether its cause cannot pass by itself
    (permanent: the slot ends at once) or may (transient: retried, spec.backoffLimit).
    Permanent: a Secret without the credential keys, credential key names refused, a missing
    or refused bucket, access denied, invalid credentials, an http endpoint without
    `insecure`, another backup's manifest in the slot, or one that does not authenticate
    under the backup's keys (ManifestUnauthenticated), a cluster of another shard, a part
    larger than the memory budget, an encryption key missing from its Secret or not 32 bytes
    (EncryptionKeyMissing, EncryptionKeyInvalid). Transient: the cluster or its Secret gone since the pass
    looked, no healthy member, members answering for another cluster (ClusterIDMismatch), the
    store unreachable or erring (5xx, throttling), etcd errors (including a leader change), a
    snapshot corrupted in transit, timeouts, this operator losing its leadership, anything
    unexpected."""
    if isinstance(error, BackupFailed):
        return error
    if isinstance(error, StorageError):
        return BackupFailed(STORAGE_REASONS.get(error.code, "StorageError"), f"S3: {error}", error.permanent)
    if isinstance(error, SourceUnavailable):
        reason = error.reason or ("ClusterNotFound" if error.permanent else "NoHealthyMember")
        return BackupFailed(reason, str(error), error.permanent)
    if isinstance(error, EtcdError):
        return BackupFailed("EtcdUnavailable", f"etcd: {error}", False)
    if isinstance(error, SnapshotCorrupt):
        return BackupFailed("SnapshotCorrupt", str(error), False)
    if isinstance(error, KeyringError):
        # A Secret created late is waited for before the run; one without the key ID, or with
        # a key of the wrong length, does not fix itself.
        return BackupFailed(error.reason, error.message, True)
    if isinstance(error, BudgetTooSmall):
        return BackupFailed("MemoryBudgetTooSmall", str(error), True)
    if isinstance(error, (asyncio.TimeoutError, TimeoutError)):
        return BackupFailed("Timeout", f"timed out: {error or type(error).__name__}", False)
    if isinstance(error, LeadershipLost):
        return BackupFailed("LeadershipLost", str(error), False)
    return BackupFailed("Error", f"{type(error).__name__}: {error}", False)
