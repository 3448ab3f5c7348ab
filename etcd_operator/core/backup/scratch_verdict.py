"""The verdict of a verification: the scratch member's answers against what the source
answered right after the snapshot (in the manifest), and how the scratch pod's check
container reports it (its exit code). Pure."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from etcd_operator.core.backup.manifest import Manifest
from etcd_operator.core.seed_containers import SCRATCH_TLS_CONTAINER


@dataclasses.dataclass(frozen=True)
class Verdict:
    verified: bool | None  # None: no verdict (could not compare)
    reason: str
    message: str
    observed: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # False: the attempt could not compare at all (retried); an inconclusive comparison is complete.
    complete: bool = True


@dataclasses.dataclass(frozen=True)
class Expected:
    """What the source answered right after the snapshot, as its manifest records it."""

    revision: int
    key_count: int | None
    hash_kv: int | None
    compact_revision: int | None

    @classmethod
    def of(cls, manifest: Manifest) -> Expected:
        return cls(manifest.revision, manifest.key_count, manifest.hash_kv, manifest.compact_revision)


def compare(manifest: Expected, revision: int, key_count: int, hash_kv: int, compact_revision: int) -> Verdict:
    """Pure: the scratch member's answers against the source's, as recorded in the manifest."""
    observed = {"revision": revision, "keyCount": key_count, "hashKv": hash_kv, "compactRevision": compact_revision}
    if revision != manifest.revision:
        return Verdict(
            False, "RevisionMismatch", f"restored revision {revision}, the manifest says {manifest.revision}", observed
        )
    if manifest.key_count is not None and key_count != manifest.key_count:
        return Verdict(
            False,
            "KeyCountMismatch",
            f"{key_count} keys restored at revision {revision}, the source had {manifest.key_count}",
            observed,
        )
    if manifest.hash_kv is None:
        return Verdict(None, "NoSourceHash", "the source's HashKV was not captured with this backup", observed)
    if compact_revision != manifest.compact_revision:
        return Verdict(
            None,
            "HashNotComparable",
            f"compacted at {compact_revision}, the source hash was taken at {manifest.compact_revision}",
            observed,
        )
    if hash_kv != manifest.hash_kv:
        return Verdict(
            False,
            "HashKVMismatch",
            f"HashKV at revision {revision} is {hash_kv}, the source's was {manifest.hash_kv}",
            observed,
        )
    return Verdict(
        True, "Verified", f"revision {revision}, {key_count} keys and HashKV {hash_kv} match the source", observed
    )


SHA256_REFUSED = 3  # etcd_operator.programs.seed's exit status: the object's sha256 differs from the manifest's
UNSEALING_REFUSED = 4  # ... the object does not decrypt or decompress (wrong or missing key, altered)


def init_failure_verdict(container: str, exit_code: int | None, detail: str) -> Verdict:
    """The scratch pod's init container failed. etcdutl refusing the snapshot, or the object
    differing from its manifest, is a verdict; any other fetch failure (the store
    unreachable) is none (verified None: the attempt is incomplete)."""
    text = f"{container} exited with {exit_code}" + (f": {detail}" if detail else "")
    if container == "restore":
        return Verdict(False, "SnapshotNotRestorable", text)
    if container == SCRATCH_TLS_CONTAINER:  # the scratch member's throwaway certificates were not made
        return Verdict(None, "ScratchMemberUnavailable", text, complete=False)
    if exit_code == SHA256_REFUSED:
        return Verdict(False, "ChecksumMismatch", text)
    if exit_code == UNSEALING_REFUSED:
        return Verdict(False, "SnapshotNotDecodable", text)
    return Verdict(None, "SnapshotNotFetched", text, complete=False)


# The scratch pod's check container exits with the code of its verdict's reason; the
# operator reads the verdict from the pod's status, and no port is ever opened for it.
CHECK_EXIT_CODES = {
    "Verified": 0,
    "RevisionMismatch": 10,
    "KeyCountMismatch": 11,
    "HashKVMismatch": 12,
    "NoSourceHash": 13,
    "HashNotComparable": 14,
    "ScratchMemberUnavailable": 15,
}
_REASON_OF_EXIT_CODE = {code: reason for reason, code in CHECK_EXIT_CODES.items()}
_VERIFIED_OF_REASON = {
    "Verified": True,
    "RevisionMismatch": False,
    "KeyCountMismatch": False,
    "HashKVMismatch": False,
    "NoSourceHash": None,
    "HashNotComparable": None,
}


def check_exit_code(verdict: Verdict) -> int:
    return CHECK_EXIT_CODES[verdict.reason]


def check_verdict(exit_code: int | None, message: str) -> Verdict:
    """The verdict the check container reported by its exit code; `message` is its
    termination message, for people (empty where the runtime keeps none). An exit code
    that names no verdict (the checker crashed) is an attempt that could not compare."""
    reason = _REASON_OF_EXIT_CODE.get(exit_code) if exit_code is not None else None
    if reason is None or reason not in _VERIFIED_OF_REASON:
        return Verdict(
            None,
            reason or "ScratchCheckFailed",
            message or f"the scratch pod's check exited with {exit_code}",
            complete=False,
        )
    return Verdict(_VERIFIED_OF_REASON[reason], reason, message or f"the scratch pod's check reported {reason}")
