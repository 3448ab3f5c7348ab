"""Service-account tokens via the TokenRequest API, bound to the pod like kubelet's."""

from __future__ import annotations

import dataclasses
import time
from urllib.parse import quote

from nodeagent.kube import Kube

DEFAULT_EXPIRATION = 3607  # what kubelet asks for
MINIMUM_EXPIRATION = 600


@dataclasses.dataclass(frozen=True)
class Token:
    value: str
    issued: float  # time.time()
    lifetime: float

    def needs_refresh(self) -> bool:
        # kubelet refreshes after 80% of the lifetime
        return time.time() > self.issued + 0.8 * self.lifetime


async def request_token(
    kube: Kube,
    pod: dict,
    service_account: str,
    audience: str | None,
    expiration: int | None,
) -> Token:
    meta = pod["metadata"]
    seconds = max(MINIMUM_EXPIRATION, int(expiration or DEFAULT_EXPIRATION))
    spec: dict = {
        "expirationSeconds": seconds,
        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]},
    }
    if audience:
        spec["audiences"] = [audience]
    path = f"/api/v1/namespaces/{quote(meta['namespace'])}/serviceaccounts/{quote(service_account)}/token"
    issued = time.time()
    response = await kube.create(
        path,
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": spec,
        },
    )
    return Token(response["status"]["token"], issued, float(seconds))
