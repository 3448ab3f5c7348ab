"""Writes single-layer OCI image archives (a tar of an OCI image layout) from local files.

The output is reproducible: entries are sorted, every mtime is EPOCH, owners and modes are
the ones given, gzip carries no timestamp. The same inputs give the same digests, byte for
byte, so an archive can be cached by a hash of its inputs.

Facts from the OCI image spec: a layout is `oci-layout`, `index.json` and
`blobs/sha256/<hex>`; the config's rootfs.diff_ids are the digests of the uncompressed
layers; containerd names an imported image after the index annotation
`io.containerd.image.name`.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
import os
import pathlib
import tarfile

EPOCH = 0
LAYOUT_VERSION = "1.0.0"
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
CONTAINERD_NAME = "io.containerd.image.name"
REF_NAME = "org.opencontainers.image.ref.name"


@dataclasses.dataclass(frozen=True)
class Entry:
    """One path in the image's root filesystem: a file copied from `source` or holding
    `data`, a directory, or a symlink to `link`."""

    path: str  # inside the image, e.g. "usr/local/bin/etcd" (a leading / is dropped)
    source: pathlib.Path | None = None
    data: bytes | None = None
    link: str | None = None
    directory: bool = False
    mode: int = 0o644
    uid: int = 0
    gid: int = 0
    xattrs: tuple[tuple[str, bytes], ...] = ()  # e.g. ("security.capability", <vfs_cap_data>)

    def __post_init__(self):
        kinds = [self.source is not None, self.data is not None, self.link is not None, self.directory]
        if sum(kinds) != 1:
            raise ValueError(f"{self.path}: give exactly one of source, data, link, directory")
        object.__setattr__(self, "path", normalized(self.path))

    def content(self) -> bytes | None:
        if self.source is not None:
            return pathlib.Path(self.source).read_bytes()
        return self.data

    def fingerprint(self) -> dict:
        """What identifies this entry for a cache key (a file's content, not its path)."""
        content = self.content()
        return {
            "path": self.path,
            "mode": self.mode,
            "uid": self.uid,
            "gid": self.gid,
            "link": self.link,
            "directory": self.directory,
            "xattrs": [(name, value.hex()) for name, value in self.xattrs],
            "sha256": hashlib.sha256(content).hexdigest() if content is not None else None,
        }


def file(
    path: str,
    source: pathlib.Path | str,
    mode: int = 0o755,
    uid: int = 0,
    gid: int = 0,
    xattrs: tuple[tuple[str, bytes], ...] = (),
) -> Entry:
    return Entry(path, source=pathlib.Path(source), mode=mode, uid=uid, gid=gid, xattrs=xattrs)


def text(path: str, content: str, mode: int = 0o644) -> Entry:
    return Entry(path, data=content.encode(), mode=mode)


def directory(path: str, mode: int = 0o755, uid: int = 0, gid: int = 0) -> Entry:
    return Entry(path, directory=True, mode=mode, uid=uid, gid=gid)


def symlink(path: str, target: str) -> Entry:
    return Entry(path, link=target, mode=0o777)


@dataclasses.dataclass(frozen=True)
class Config:
    """The image config's runtime part (the Dockerfile's ENTRYPOINT, CMD, USER, ...)."""

    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    user: str = ""
    env: tuple[str, ...] = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
    working_dir: str = ""
    exposed_ports: tuple[str, ...] = ()  # "2379/tcp"
    labels: tuple[tuple[str, str], ...] = ()

    def as_oci(self) -> dict:
        config: dict = {"Env": list(self.env)}
        if self.entrypoint:
            config["Entrypoint"] = list(self.entrypoint)
        if self.cmd:
            config["Cmd"] = list(self.cmd)
        if self.user:
            config["User"] = self.user
        if self.working_dir:
            config["WorkingDir"] = self.working_dir
        if self.exposed_ports:
            config["ExposedPorts"] = {port: {} for port in self.exposed_ports}
        if self.labels:
            config["Labels"] = dict(self.labels)
        return config


@dataclasses.dataclass(frozen=True)
class Written:
    archive: pathlib.Path
    name: str
    manifest_digest: str
    config_digest: str
    layer_digest: str


def normalized(path: str) -> str:
    parts = [part for part in path.strip("/").split("/") if part not in ("", ".")]
    if not parts or ".." in parts:
        raise ValueError(f"not a path inside an image: {path!r}")
    return "/".join(parts)


def with_parents(entries: list[Entry]) -> list[Entry]:
    """The entries plus a root-owned 0755 directory for every parent not given, sorted."""
    by_path: dict[str, Entry] = {}
    for entry in entries:
        if entry.path in by_path:
            raise ValueError(f"{entry.path} is given twice")
        by_path[entry.path] = entry
    for entry in entries:
        parts = entry.path.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            parent = "/".join(parts[:depth])
            by_path.setdefault(parent, directory(parent))
    return [by_path[path] for path in sorted(by_path)]


def layer_tar(entries: list[Entry]) -> bytes:
    """The uncompressed layer: a PAX tar with fixed mtimes and numeric owners only."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in with_parents(entries):
            info = tarfile.TarInfo(entry.path + ("/" if entry.directory else ""))
            info.mtime, info.mode, info.uid, info.gid = EPOCH, entry.mode, entry.uid, entry.gid
            info.uname = info.gname = ""
            # PAX records carry extended attributes; binary values pass as surrogate escapes.
            info.pax_headers = {
                f"SCHILY.xattr.{name}": value.decode("utf-8", "surrogateescape") for name, value in entry.xattrs
            }
            if entry.directory:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif entry.link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, entry.link
                tar.addfile(info)
            else:
                content = entry.content()
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def gzipped(data: bytes) -> bytes:
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", compresslevel=6, mtime=EPOCH, filename="") as out:
        out.write(data)
    return buffer.getvalue()


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def canonical_json(value: dict) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def split_reference(name: str) -> tuple[str, str]:
    """`registry.k8s.io/pause:3.10` -> (`registry.k8s.io/pause`, `3.10`)."""
    repository, _, tag = name.rpartition(":")
    if not repository or "/" in tag:
        raise ValueError(f"an image name needs a tag: {name!r}")
    return repository, tag


def image_blobs(
    name: str,
    entries: list[Entry],
    config: Config,
    architecture: str = "amd64",
) -> tuple[dict, dict[str, bytes]]:
    """The index.json document and the blobs (digest -> bytes) of a one-layer image."""
    _, tag = split_reference(name)
    layer = layer_tar(entries)
    compressed = gzipped(layer)
    image_config = canonical_json(
        {
            "architecture": architecture,
            "os": "linux",
            "created": "1970-01-01T00:00:00Z",
            "config": config.as_oci(),
            "rootfs": {"type": "layers", "diff_ids": [digest_of(layer)]},
            "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "e2e/images"}],
        }
    )
    manifest = canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "config": {"mediaType": CONFIG_MEDIA_TYPE, "digest": digest_of(image_config), "size": len(image_config)},
            "layers": [{"mediaType": LAYER_MEDIA_TYPE, "digest": digest_of(compressed), "size": len(compressed)}],
        }
    )
    index = {
        "schemaVersion": 2,
        "mediaType": INDEX_MEDIA_TYPE,
        "manifests": [
            {
                "mediaType": MANIFEST_MEDIA_TYPE,
                "digest": digest_of(manifest),
                "size": len(manifest),
                "platform": {"architecture": architecture, "os": "linux"},
                "annotations": {CONTAINERD_NAME: name, REF_NAME: tag},
            }
        ],
    }
    blobs = {digest_of(blob): blob for blob in (compressed, image_config, manifest)}
    return index, blobs


def write_archive(out: pathlib.Path, name: str, entries: list[Entry], config: Config) -> Written:
    """Writes the OCI layout of one image as a tar at `out` (atomically)."""
    index, blobs = image_blobs(name, entries, config)
    members = {
        "oci-layout": canonical_json({"imageLayoutVersion": LAYOUT_VERSION}),
        "index.json": canonical_json(index),
    }
    for digest, blob in blobs.items():
        members["blobs/" + digest.replace(":", "/", 1)] = blob
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f"{out.name}.{os.getpid()}.partial")  # two writers never share one
    with tarfile.open(partial, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory_name in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(directory_name + "/")
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, EPOCH
            tar.addfile(info)
        for member in sorted(members):
            info = tarfile.TarInfo(member)
            info.size, info.mode, info.mtime = len(members[member]), 0o644, EPOCH
            tar.addfile(info, io.BytesIO(members[member]))
    partial.replace(out)
    manifest = json.loads(blobs[index["manifests"][0]["digest"]])
    return Written(
        out, name, index["manifests"][0]["digest"], manifest["config"]["digest"], manifest["layers"][0]["digest"]
    )
