"""Writes the release image as an OCI image layout: one image per architecture, one layer each,
under one image index tagged with the version; then attaches files to it as OCI artifacts.

    oci_layout.py image LAYOUT VERSION REVISION ARCH=ROOTFS_TAR...   (prints the index's digest)
    oci_layout.py attach LAYOUT SUBJECT ARTIFACT_TYPE FILE     (SUBJECT: index or linux/ARCH)
    oci_layout.py digest LAYOUT SUBJECT
    oci_layout.py image-only LAYOUT OUT   (OUT: a layout of the image index alone, for pushing)

An attached file is an artifact manifest (OCI 1.1: `artifactType`, an empty config, the file as
its one layer) whose `subject` is the image index or one platform's manifest, so a registry
lists it among that image's referrers; the layout's index.json lists it beside the image.

Each ROOTFS_TAR is an already normalized tar of that architecture's root (sorted, owned by 0:0,
dated SOURCE_DATE_EPOCH); it is gzipped here without a name or time, so the same trees give the
same digests. The image config carries the entrypoint, the non-root user and the labels.
"""

from __future__ import annotations

import datetime
import gzip
import hashlib
import json
import os
import pathlib
import sys

MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
MEDIA_EMPTY = "application/vnd.oci.empty.v1+json"
SOURCE = "https://github.com/etcd-operator/etcd-operator"
USER = "65532:65532"
ENTRYPOINT = ["python", "-m", "etcd_operator"]
VARIANTS = {"arm64": "v8"}


def source_date() -> str:
    """SOURCE_DATE_EPOCH (the commit's time) as an RFC 3339 UTC time, the one time a release holds."""
    epoch = int(os.environ["SOURCE_DATE_EPOCH"])
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def canonical(value: dict) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


class Layout:
    def __init__(self, root: pathlib.Path):
        self.blobs = root / "blobs" / "sha256"
        self.blobs.mkdir(parents=True, exist_ok=True)
        (root / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
        self.root = root

    def put(self, data: bytes, media_type: str) -> dict:
        digest = hashlib.sha256(data).hexdigest()
        (self.blobs / digest).write_bytes(data)
        return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}


def image(layout: Layout, arch: str, rootfs_tar: pathlib.Path, labels: dict, created: str) -> dict:
    raw = rootfs_tar.read_bytes()
    layer = layout.put(gzip.compress(raw, compresslevel=6, mtime=0), MEDIA_LAYER)
    platform = {"architecture": arch, "os": "linux"} | ({"variant": VARIANTS[arch]} if arch in VARIANTS else {})
    config = {
        "created": created,
        "author": "etcd-operator",
        **platform,
        "config": {
            "User": USER,
            "Entrypoint": ENTRYPOINT,
            "WorkingDir": "/",
            "Env": [
                "PATH=/usr/local/bin:/usr/bin",
                "PYTHONDONTWRITEBYTECODE=1",
                "PYTHONUNBUFFERED=1",
            ],
            "ExposedPorts": {"8080/tcp": {}},
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(raw).hexdigest()}"]},
        "history": [{"created": created, "created_by": "packaging/image/build-release.sh"}],
    }
    manifest = {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": layout.put(canonical(config), MEDIA_CONFIG),
        "layers": [layer],
        "annotations": labels,
    }
    return layout.put(canonical(manifest), MEDIA_MANIFEST) | {"platform": platform}


def write_image(root: pathlib.Path, version: str, revision: str, trees: list[str]) -> None:
    created = source_date()
    labels = {
        "org.opencontainers.image.title": "etcd-operator",
        "org.opencontainers.image.version": version,
        "org.opencontainers.image.revision": revision,
        "org.opencontainers.image.source": SOURCE,
        "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.created": created,
    }
    layout = Layout(root)
    manifests = []
    for tree in trees:
        arch, _, path = tree.partition("=")
        manifests.append(image(layout, arch, pathlib.Path(path), labels, created))
    index = {"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": manifests, "annotations": labels}
    descriptor = layout.put(canonical(index), MEDIA_INDEX)
    descriptor["annotations"] = {"org.opencontainers.image.ref.name": version}
    (root / "index.json").write_bytes(
        canonical({"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": [descriptor]})
    )
    print(descriptor["digest"])


def find(layout: Layout, subject: str) -> dict:
    """The descriptor of the image index (`index`) or of one platform's manifest (`linux/ARCH`)."""
    (top,) = [
        m for m in json.loads((layout.root / "index.json").read_text())["manifests"] if m["mediaType"] == MEDIA_INDEX
    ]
    if subject == "index":
        return {k: top[k] for k in ("mediaType", "digest", "size")}
    index = json.loads((layout.blobs / top["digest"].removeprefix("sha256:")).read_text())
    for entry in index["manifests"]:
        if f"{entry['platform']['os']}/{entry['platform']['architecture']}" == subject:
            return {k: entry[k] for k in ("mediaType", "digest", "size")}
    raise SystemExit(f"oci_layout: no {subject} image in {layout.root}")


def attach(root: pathlib.Path, subject_name: str, artifact_type: str, path: pathlib.Path) -> None:
    layout = Layout(root)
    subject = find(layout, subject_name)
    file = layout.put(path.read_bytes(), artifact_type) | {"annotations": {"org.opencontainers.image.title": path.name}}
    manifest = {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "artifactType": artifact_type,
        "config": layout.put(b"{}", MEDIA_EMPTY),
        "layers": [file],
        "subject": subject,
    }
    descriptor = layout.put(canonical(manifest), MEDIA_MANIFEST) | {"artifactType": artifact_type}
    top = json.loads((root / "index.json").read_text())
    top["manifests"].append(descriptor)
    (root / "index.json").write_bytes(canonical(top))


def image_only(root: pathlib.Path, out: pathlib.Path) -> None:
    """The image index alone as a layout (the blobs hard-linked): what is pushed; the release
    signs and attests in the registry instead of pushing the layout's attachments."""
    top = json.loads((root / "index.json").read_text())
    (image,) = [m for m in top["manifests"] if m["mediaType"] == MEDIA_INDEX]
    (out / "blobs" / "sha256").mkdir(parents=True)
    for blob in (root / "blobs" / "sha256").iterdir():
        os.link(blob, out / "blobs" / "sha256" / blob.name)
    (out / "oci-layout").write_text((root / "oci-layout").read_text())
    # crane pushes a layout's index.json itself as the index: here, the image index's own bytes.
    (out / "index.json").write_bytes((root / "blobs" / "sha256" / image["digest"].removeprefix("sha256:")).read_bytes())


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    if command == "image":
        write_image(pathlib.Path(args[0]), args[1], args[2], args[3:])
    elif command == "attach":
        attach(pathlib.Path(args[0]), args[1], args[2], pathlib.Path(args[3]))
    elif command == "digest":
        print(find(Layout(pathlib.Path(args[0])), args[1])["digest"])
    elif command == "image-only":
        image_only(pathlib.Path(args[0]), pathlib.Path(args[1]))
    else:
        raise SystemExit(__doc__)
