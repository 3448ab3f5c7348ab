"""What the operator's install allows it to do with object storage. Pure.

Ambient credentials: a storage.s3 block without credentialsSecretRef makes the S3 SDK use
the operator's own cloud identity (IRSA, an instance role, its environment) on whatever
bucket and endpoint the block names. A namespace user could then read or write any bucket
the operator's identity reaches. So such a block is honoured only in the namespaces the
install lists (AMBIENT_CREDENTIALS_NAMESPACES; Helm value ambientCredentials.namespaces);
by default in none. Elsewhere the backup or restore does nothing and says why
(AMBIENT_NOT_ALLOWED)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from etcd_operator.core.backup.orphans import DEFAULT_GRACE_SECONDS

AMBIENT_NOT_ALLOWED = "AmbientCredentialsNotAllowed"


@dataclasses.dataclass(frozen=True)
class StoragePolicy:
    ambient_namespaces: frozenset[str] = frozenset()  # empty: ambient credentials nowhere
    orphan_grace_seconds: float = DEFAULT_GRACE_SECONDS  # backup/orphans.py

    @classmethod
    def from_settings(cls, ambient_namespaces: str, orphan_grace: str) -> StoragePolicy:
        names = frozenset(n.strip() for n in ambient_namespaces.split(",") if n.strip())
        return cls(names, float(orphan_grace) if orphan_grace else DEFAULT_GRACE_SECONDS)

    def ambient_refusal(self, namespace: str, s3: Mapping[str, Any]) -> str | None:
        """Why this storage.s3 block may not be used in `namespace`, or None when it may."""
        if s3.get("credentialsSecretRef") or namespace in self.ambient_namespaces:
            return None
        return (
            f"storage.s3 names no credentialsSecretRef, and this operator's install does not allow "
            f"ambient credentials (its own cloud identity) for namespace {namespace} "
            f"(AMBIENT_CREDENTIALS_NAMESPACES); nothing is read from or written to bucket "
            f"{s3.get('bucket', '')!r}. Name a credentials Secret, or ask the operator's administrator"
        )
