"""A pod's volumes as host directories: emptyDir (per pod, removed with it),
persistentVolumeClaim (the bound PV's directory), hostPath, secret, configMap,
downwardAPI and projected (including service-account tokens, refreshed before expiry)."""

from __future__ import annotations

import asyncio
import logging
import os
import pathlib
import shutil
import time
from urllib.parse import quote

from nodeagent import fieldpaths, tokens
from nodeagent.configdata import ConfigData
from nodeagent.envvars import expand
from nodeagent.kube import Kube
from nodeagent.launcher import Mount
from nodeagent.paths import Paths

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
SYNTHETIC_SA_VOLUME = "localkube-service-account"
DEFAULT_MODE = 0o644
ALWAYS_READ_ONLY = ("secret", "configMap", "projected", "downwardAPI")


class VolumeError(Exception):
    """A volume cannot be set up yet (the pod stays ContainerCreating)."""


def service_account_volume() -> dict:
    """The projected volume the ServiceAccount admission plugin adds as kube-api-access-*."""
    return {
        "name": SYNTHETIC_SA_VOLUME,
        "projected": {
            "defaultMode": DEFAULT_MODE,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": tokens.DEFAULT_EXPIRATION, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
            ],
        },
    }


def _safe_relative(path: str) -> str:
    parts = pathlib.PurePosixPath(path).parts
    if not parts or path.startswith("/") or ".." in parts:
        raise VolumeError(f"invalid path {path!r} in volume")
    return path


class PodVolumes:
    def __init__(self, kube: Kube, paths: Paths, pod: dict, needs_service_account: bool):
        self.kube = kube
        self.paths = paths
        self.pod = pod
        self.uid = pod["metadata"]["uid"]
        self.namespace = pod["metadata"]["namespace"]
        self.host_paths: dict[str, pathlib.Path] = {}
        self._tokens: dict[tuple[str, str], tokens.Token] = {}
        self.volumes = list(pod["spec"].get("volumes") or [])
        self.synthetic_sa = needs_service_account and self._wants_synthetic_sa()
        if self.synthetic_sa:
            self.volumes.append(service_account_volume())

    def _wants_synthetic_sa(self) -> bool:
        if self.pod["spec"].get("automountServiceAccountToken") is False:
            return False
        return not any(
            m.get("mountPath", "").rstrip("/") == SERVICE_ACCOUNT_MOUNT
            for c in self.pod["spec"].get("containers", []) + self.pod["spec"].get("initContainers", [])
            for m in c.get("volumeMounts") or []
        )

    # --- setting up -------------------------------------------------------------------

    async def prepare(self, pod: dict) -> None:
        """Creates or refreshes every volume; raises VolumeError while one is not ready."""
        self.pod = pod
        self.paths.pod_dir(self.uid).mkdir(parents=True, exist_ok=True)
        self.paths.pod_dir(self.uid).chmod(0o700)
        data = ConfigData(self.kube, self.namespace)
        for volume in self.volumes:
            self.host_paths[volume["name"]] = await self._prepare(volume, data)

    async def refresh(self) -> None:
        """Rewrites the Secret, ConfigMap, downward API and projected volumes from their
        sources, as the kubelet's periodic sync does; each volume changes in one atomic step."""
        data = ConfigData(self.kube, self.namespace)
        for volume in self.volumes:
            if any(kind in volume for kind in ALWAYS_READ_ONLY):
                self.host_paths[volume["name"]] = await self._prepare(volume, data)

    async def _prepare(self, volume: dict, data: ConfigData) -> pathlib.Path:
        name = volume["name"]
        own_dir = self.paths.volume_dir(self.uid, name)
        if "emptyDir" in volume:
            own_dir.mkdir(parents=True, exist_ok=True)
            return own_dir
        if "persistentVolumeClaim" in volume:
            return await self._claim_path(volume["persistentVolumeClaim"]["claimName"])
        if "ephemeral" in volume:
            return await self._claim_path(f"{self.pod['metadata']['name']}-{name}")
        if "hostPath" in volume:
            return _host_path(volume["hostPath"])
        files: dict[str, tuple[bytes, int]] = {}
        if "secret" in volume:
            source = volume["secret"]
            await self._add_keyed(
                files, "secret", source.get("secretName", ""), source, data, source.get("defaultMode", DEFAULT_MODE)
            )
        elif "configMap" in volume:
            source = volume["configMap"]
            await self._add_keyed(
                files, "configmap", source["name"], source, data, source.get("defaultMode", DEFAULT_MODE)
            )
        elif "downwardAPI" in volume:
            source = volume["downwardAPI"]
            self._add_downward(files, source, source.get("defaultMode", DEFAULT_MODE))
        elif "projected" in volume:
            await self._add_projected(files, name, volume["projected"], data)
        else:
            kinds = sorted(k for k in volume if k != "name")
            raise VolumeError(f"volume {name!r}: unsupported volume type {kinds}")
        _write_files(own_dir, files)
        return own_dir

    async def _claim_path(self, claim: str) -> pathlib.Path:
        pvc = await self.kube.get_or_none(
            f"/api/v1/namespaces/{quote(self.namespace)}/persistentvolumeclaims/{quote(claim)}"
        )
        if pvc is None:
            raise VolumeError(f'persistentvolumeclaim "{claim}" not found')
        volume_name = pvc.get("spec", {}).get("volumeName")
        if (pvc.get("status") or {}).get("phase") != "Bound" or not volume_name:
            raise VolumeError(f'persistentvolumeclaim "{claim}" is not bound yet')
        pv = await self.kube.get_or_none(f"/api/v1/persistentvolumes/{quote(volume_name)}")
        if pv is None:
            raise VolumeError(f'persistentvolume "{volume_name}" not found')
        spec = pv["spec"]
        path = (spec.get("hostPath") or {}).get("path") or (spec.get("local") or {}).get("path")
        if not path:
            raise VolumeError(f'persistentvolume "{volume_name}" has no hostPath or local path')
        host = pathlib.Path(path)
        await asyncio.to_thread(host.mkdir, parents=True, exist_ok=True)
        return host

    async def _add_keyed(self, files, kind, name, source, data: ConfigData, mode: int, prefix: str = "") -> None:
        values = await (data.secret(name) if kind == "secret" else data.configmap(name))
        if values is None:
            if source.get("optional"):
                return
            raise VolumeError(f'{kind} "{name}" not found')
        items = source.get("items")
        if not items:
            for key, value in values.items():
                files[prefix + key] = (value, mode)
            return
        for item in items:
            if item["key"] not in values:
                if source.get("optional"):
                    continue
                raise VolumeError(f'{kind} "{name}" has no key "{item["key"]}"')
            files[prefix + _safe_relative(item["path"])] = (values[item["key"]], item.get("mode", mode))

    def _add_downward(self, files, source, mode: int) -> None:
        for item in source.get("items") or []:
            try:
                if "fieldRef" in item:
                    value = fieldpaths.field_value(self.pod, item["fieldRef"]["fieldPath"])
                else:
                    ref = item["resourceFieldRef"]
                    container = next(
                        (c for c in self.pod["spec"]["containers"] if c["name"] == ref.get("containerName")), {}
                    )
                    value = fieldpaths.resource_value(container, ref["resource"], ref.get("divisor"))
            except fieldpaths.FieldError as e:
                raise VolumeError(str(e)) from None
            files[_safe_relative(item["path"])] = (value.encode(), item.get("mode", mode))

    async def _add_projected(self, files, volume_name: str, projected: dict, data: ConfigData) -> None:
        mode = projected.get("defaultMode", DEFAULT_MODE)
        for source in projected.get("sources") or []:
            if "secret" in source:
                await self._add_keyed(files, "secret", source["secret"]["name"], source["secret"], data, mode)
            elif "configMap" in source:
                await self._add_keyed(files, "configmap", source["configMap"]["name"], source["configMap"], data, mode)
            elif "downwardAPI" in source:
                self._add_downward(files, source["downwardAPI"], mode)
            elif "serviceAccountToken" in source:
                spec = source["serviceAccountToken"]
                path = _safe_relative(spec.get("path", "token"))
                token = await self._token(volume_name, path, spec)
                files[path] = (token.value.encode(), mode)

    async def _token(self, volume_name: str, path: str, spec: dict) -> tokens.Token:
        key = (volume_name, path)
        token = self._tokens.get(key)
        if token is None or token.needs_refresh():
            account = self.pod["spec"].get("serviceAccountName") or "default"
            token = await tokens.request_token(
                self.kube, self.pod, account, spec.get("audience"), spec.get("expirationSeconds")
            )
            self._tokens[key] = token
        return token

    def tokens_due(self) -> bool:
        return any(t.needs_refresh() for t in self._tokens.values())

    # --- mounting ---------------------------------------------------------------------

    def mounts(self, container: dict, env: dict[str, str], wants_service_account: bool) -> list[Mount]:
        kinds = {v["name"]: v for v in self.volumes}
        result = []
        for vm in container.get("volumeMounts") or []:
            volume = kinds.get(vm["name"])
            if volume is None or vm["name"] not in self.host_paths:
                raise VolumeError(f"volume {vm['name']!r} is not defined in the pod")
            source = self.host_paths[vm["name"]]
            sub = vm.get("subPath") or (expand(vm["subPathExpr"], env.get) if vm.get("subPathExpr") else "")
            if sub:
                source = source / _safe_relative(sub)
                if not source.exists():
                    source.mkdir(parents=True, exist_ok=True)
            read_only = bool(
                vm.get("readOnly")
                or any(kind in volume for kind in ALWAYS_READ_ONLY)
                or (volume.get("persistentVolumeClaim") or {}).get("readOnly")
                or (volume.get("hostPath") or {}).get("readOnly")
            )
            result.append(Mount(source, vm["mountPath"], read_only))
        if wants_service_account and self.synthetic_sa:
            result.append(Mount(self.host_paths[SYNTHETIC_SA_VOLUME], SERVICE_ACCOUNT_MOUNT, True))
        return result

    def cleanup(self) -> None:
        shutil.rmtree(self.paths.pod_dir(self.uid), ignore_errors=True)


def _host_path(source: dict) -> pathlib.Path:
    path = pathlib.Path(source["path"])
    kind = source.get("type") or ""
    if kind == "DirectoryOrCreate":
        path.mkdir(parents=True, exist_ok=True)
    elif kind == "FileOrCreate" and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    elif kind in ("Directory", "File", "Socket") and not path.exists():
        raise VolumeError(f"hostPath {path} does not exist")
    return path


DATA_LINK = "..data"


def _write_files(directory: pathlib.Path, files: dict[str, tuple[bytes, int]]) -> None:
    """Makes `directory` hold exactly `files`, the way the kubelet's atomic writer does: the
    files live in a timestamped directory that the `..data` symlink points at, each visible
    name is a symlink through `..data`, and a change swaps `..data` in one rename, so a
    reader never sees a mix of old and new files (a certificate with another key)."""
    directory.mkdir(parents=True, exist_ok=True)
    link = directory / DATA_LINK
    current = directory / os.readlink(link) if link.is_symlink() else None
    if current is not None and _holds_exactly(current, files):
        _link_names(directory, files)
        return
    version = directory / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{time.monotonic_ns()}"
    version.mkdir()
    for rel, (content, mode) in files.items():
        target = version / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        target.chmod(mode)
    staged = directory / "..data_tmp"
    staged.unlink(missing_ok=True)
    staged.symlink_to(version.name)
    os.replace(staged, link)
    _link_names(directory, files)
    if current is not None and current.name != version.name:
        shutil.rmtree(current, ignore_errors=True)


def _holds_exactly(version: pathlib.Path, files: dict[str, tuple[bytes, int]]) -> bool:
    present = {str(p.relative_to(version)) for p in version.rglob("*") if p.is_file()}
    if present != set(files):
        return False
    return all(
        (version / rel).read_bytes() == content and ((version / rel).stat().st_mode & 0o7777) == mode
        for rel, (content, mode) in files.items()
    )


def _link_names(directory: pathlib.Path, files: dict[str, tuple[bytes, int]]) -> None:
    """Top-level names point through ..data; names no longer in the volume go."""
    tops = {pathlib.PurePosixPath(rel).parts[0] for rel in files}
    for top in tops:
        entry = directory / top
        wanted = f"{DATA_LINK}/{top}"
        if entry.is_symlink() and os.readlink(entry) == wanted:
            continue
        staged = directory / f"..{top}.tmp"
        staged.unlink(missing_ok=True)
        staged.symlink_to(wanted)
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        os.replace(staged, entry)
    current = os.readlink(directory / DATA_LINK)
    for entry in directory.iterdir():
        if entry.name.startswith(".."):
            if entry.is_symlink() and entry.name != DATA_LINK:
                entry.unlink(missing_ok=True)  # a staged link left by an interrupted write
            elif entry.is_dir() and not entry.is_symlink() and entry.name != current:
                shutil.rmtree(entry, ignore_errors=True)  # an older version
            continue
        if entry.name not in tops:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
