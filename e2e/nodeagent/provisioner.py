"""Dynamic provisioning for the default StorageClass `localkube`: a host directory per
claim, a PV pre-bound to the claim (kube-controller-manager's binder completes the
binding), expansion on request, and deletion of directory and PV once Released."""

from __future__ import annotations

import logging
import pathlib
import shutil
from typing import TYPE_CHECKING
from urllib.parse import quote

from nodeagent.fieldpaths import FieldError, parse_quantity
from nodeagent.kube import is_status
from nodeagent.loops import WakeableLoop

if TYPE_CHECKING:
    from nodeagent.agent import Agent

log = logging.getLogger(__name__)

STORAGE_CLASS = "localkube"
PROVISIONER = "localkube.local/hostpath"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
RETRY_INTERVAL = 5.0


def storage_class() -> dict:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": STORAGE_CLASS, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "allowVolumeExpansion": True,
        "volumeBindingMode": "Immediate",
    }


def pv_name_for(claim: dict) -> str:
    return f"pvc-{claim['metadata']['uid']}"


def _storage(obj_resources: dict | None) -> str | None:
    return ((obj_resources or {}).get("requests") or {}).get("storage")


class Provisioner(WakeableLoop):
    interval = RETRY_INTERVAL
    purpose = "provisioning cycle"

    def __init__(self, agent: Agent):
        self.agent = agent
        super().__init__()

    async def ensure_storage_class(self) -> None:
        path = "/apis/storage.k8s.io/v1/storageclasses"
        if await self.agent.kube.get_or_none(f"{path}/{STORAGE_CLASS}") is None:
            try:
                await self.agent.kube.create(path, storage_class())
                log.info("created default StorageClass %s", STORAGE_CLASS)
            except Exception as e:
                if not is_status(e, 409):
                    raise

    async def _cycle(self) -> None:
        volumes = {pv["metadata"]["name"]: pv for pv in self.agent.pvs.items()}
        for claim in self.agent.pvcs.items():
            spec = claim["spec"]
            if spec.get("storageClassName") != STORAGE_CLASS or claim["metadata"].get("deletionTimestamp"):
                continue
            if not spec.get("volumeName") and pv_name_for(claim) not in volumes:
                await self._provision(claim)
            elif spec.get("volumeName") in volumes:
                await self._expand(claim, volumes[spec["volumeName"]])
        for pv in volumes.values():
            ours = (pv["metadata"].get("annotations") or {}).get(PROVISIONED_BY) == PROVISIONER
            phase = (pv.get("status") or {}).get("phase")
            if ours and phase in ("Released", "Failed") and pv["spec"].get("persistentVolumeReclaimPolicy") == "Delete":
                await self._delete(pv)

    async def _provision(self, claim: dict) -> None:
        meta, spec = claim["metadata"], claim["spec"]
        name = pv_name_for(claim)
        directory = self.agent.paths.pv_dir(name)
        directory.mkdir(parents=True, exist_ok=True)
        body = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name, "annotations": {PROVISIONED_BY: PROVISIONER}},
            "spec": {
                "capacity": {"storage": _storage(spec.get("resources")) or "1Gi"},
                "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Delete",
                "storageClassName": STORAGE_CLASS,
                "volumeMode": spec.get("volumeMode") or "Filesystem",
                "hostPath": {"path": str(directory), "type": "DirectoryOrCreate"},
                "claimRef": {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "namespace": meta["namespace"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                },
            },
        }
        try:
            await self.agent.kube.create("/api/v1/persistentvolumes", body)
            log.info("provisioned %s for %s/%s at %s", name, meta["namespace"], meta["name"], directory)
        except Exception as e:
            if not is_status(e, 409):
                log.warning("provisioning %s failed: %s", name, e)

    async def _expand(self, claim: dict, pv: dict) -> None:
        wanted = _storage(claim["spec"].get("resources"))
        have = (pv["spec"].get("capacity") or {}).get("storage")
        if not wanted or not have:
            return
        try:
            if parse_quantity(wanted) <= parse_quantity(have):
                reported = ((claim.get("status") or {}).get("capacity") or {}).get("storage")
                if reported and parse_quantity(reported) < parse_quantity(have):
                    await self._report_capacity(claim, have)
                return
        except FieldError:
            return
        await self.agent.kube.patch(
            f"/api/v1/persistentvolumes/{quote(pv['metadata']['name'])}", {"spec": {"capacity": {"storage": wanted}}}
        )
        await self._report_capacity(claim, wanted)
        log.info("expanded %s to %s", pv["metadata"]["name"], wanted)

    async def _report_capacity(self, claim: dict, size: str) -> None:
        meta = claim["metadata"]
        await self.agent.kube.patch(
            f"/api/v1/namespaces/{quote(meta['namespace'])}/persistentvolumeclaims/{quote(meta['name'])}/status",
            {
                "status": {
                    "capacity": {"storage": size},
                    "conditions": None,
                    "allocatedResources": None,
                    "allocatedResourceStatuses": None,
                }
            },
        )

    async def _delete(self, pv: dict) -> None:
        name = pv["metadata"]["name"]
        path = (pv["spec"].get("hostPath") or {}).get("path")
        if path and pathlib.Path(path) == self.agent.paths.pv_dir(name):
            shutil.rmtree(path, ignore_errors=True)
        try:
            await self.agent.kube.delete(f"/api/v1/persistentvolumes/{quote(name)}")
            log.info("deleted released volume %s and its directory", name)
        except Exception as e:
            if not is_status(e, 404):
                log.warning("deleting %s failed: %s", name, e)

    def claim_directory(self, namespace: str, claim: str) -> str | None:
        pvc = self.agent.pvcs.get(namespace, claim)
        if pvc is None or not pvc["spec"].get("volumeName"):
            return None
        pv = next((v for v in self.agent.pvs.items() if v["metadata"]["name"] == pvc["spec"]["volumeName"]), None)
        if pv is None:
            return None
        path = (pv["spec"].get("hostPath") or {}).get("path") or (pv["spec"].get("local") or {}).get("path")
        return path
