"""An expandable StorageClass on the real nodes, for the tests of volume growth. The
local-path provisioner (e2e/localkube/local_path.py) makes a folder per claim and has no
resizer; a folder has no size to grow. So the class here, served by that provisioner, comes
with a resizer run by the test, doing what a CSI driver's external-resizer does once its
volume grew: the volume's capacity, then the claim's reported capacity. The API server's
checks of an expansion (allowVolumeExpansion, no shrinking) are its own.

    with expandable_class(namespace) as storage_class:
        ...  # claims of `storage_class` in `namespace` grow when asked
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator

from tests.support.kubectl import kubectl, kubectl_json

PROVISIONER = "rancher.io/local-path"  # e2e/localkube/local_path.py
INTERVAL = 0.5
UNITS = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}


def quantity_bytes(text: str) -> int:
    """A binary-suffixed (or plain) storage quantity in bytes, as the operator writes sizes."""
    for suffix, factor in UNITS.items():
        if text.endswith(suffix):
            return int(text[: -len(suffix)]) * factor
    return int(text)


def resize_pending(claims: list[dict]) -> list[tuple[dict, str]]:
    """The bound claims of `claims` that ask for more than their volume has, with the size asked."""
    pending = []
    for claim in claims:
        wanted = claim["spec"]["resources"]["requests"].get("storage")
        have = ((claim.get("status") or {}).get("capacity") or {}).get("storage")
        if claim["spec"].get("volumeName") and wanted and have and quantity_bytes(wanted) > quantity_bytes(have):
            pending.append((claim, wanted))
    return pending


class Resizer:
    def __init__(self, namespace: str, storage_class: str):
        self.namespace, self.storage_class = namespace, storage_class
        self.resized: list[tuple[str, str]] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Resizer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        try:
            while not self._stop.wait(INTERVAL):
                claims = kubectl_json("get", "pvc", "-n", self.namespace)["items"]
                mine = [c for c in claims if c["spec"].get("storageClassName") == self.storage_class]
                for claim, wanted in resize_pending(mine):
                    self._resize(claim, wanted)
        except BaseException as e:  # judged by the test: a resizer that died grows nothing
            self.error = e

    def _resize(self, claim: dict, wanted: str) -> None:
        volume, name = claim["spec"]["volumeName"], claim["metadata"]["name"]
        kubectl("patch", "pv", volume, "--type=merge", "-p", json.dumps({"spec": {"capacity": {"storage": wanted}}}))
        status = {"capacity": {"storage": wanted}, "conditions": None, "allocatedResourceStatuses": None}
        kubectl(
            "patch",
            "pvc",
            name,
            "-n",
            self.namespace,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps({"status": status}),
        )
        self.resized.append((name, wanted))


@contextlib.contextmanager
def expandable_class(namespace: str) -> Iterator[Resizer]:
    """A StorageClass of the local-path provisioner that allows expansion, named after
    `namespace`, and its resizer for the claims of that namespace, while the block runs."""
    name = f"expandable-{namespace}"
    storage_class = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowVolumeExpansion": True,
    }
    kubectl("apply", "-f", "-", input=json.dumps(storage_class))
    resizer = Resizer(namespace, name).start()
    try:
        yield resizer
    finally:
        resizer.stop()
        kubectl("delete", "storageclass", name, "--ignore-not-found")
