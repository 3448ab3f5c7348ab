"""The release's image (packaging/image/build-release.sh): one OCI index of linux/amd64 and
linux/arm64, each a distroless root whose every native file is built for its architecture, the
amd64 one runs the operator, and the provenance attached to the index names what went in."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import tarfile

import pytest

from tests.release.conftest import ROOT, sha256

VERSION = "0.1.0"
IMAGE = f"etcd-operator-{VERSION}.oci.tar"
PROVENANCE = f"etcd-operator-{VERSION}.provenance.json"
# ELF e_machine of each platform (the ELF specification's numbers).
ELF_MACHINE = {"amd64": 62, "arm64": 183}
INDEX = "application/vnd.oci.image.index.v1+json"


class Layout:
    def __init__(self, root: pathlib.Path):
        self.root = root
        self.top = json.loads((root / "index.json").read_text())

    def blob(self, digest: str) -> bytes:
        return (self.root / "blobs" / digest.replace(":", "/", 1)).read_bytes()

    def json(self, digest: str) -> dict:
        return json.loads(self.blob(digest))

    def index_descriptor(self) -> dict:
        (descriptor,) = [m for m in self.top["manifests"] if m["mediaType"] == INDEX]
        return descriptor


@pytest.fixture(scope="module")
def layout(out, tmp_path_factory) -> Layout:
    root = tmp_path_factory.mktemp("layout")
    with tarfile.open(out / IMAGE) as archive:
        archive.extractall(root, filter="data")
    return Layout(root)


@pytest.fixture(scope="module")
def roots(layout, tmp_path_factory) -> dict[str, tuple[dict, pathlib.Path]]:
    """Each platform's image config and unpacked root filesystem, by architecture."""
    found = {}
    for entry in layout.json(layout.index_descriptor()["digest"])["manifests"]:
        manifest = layout.json(entry["digest"])
        config = layout.json(manifest["config"]["digest"])
        root = tmp_path_factory.mktemp(entry["platform"]["architecture"])
        for layer in manifest["layers"]:
            with tarfile.open(layout.root / "blobs" / layer["digest"].replace(":", "/", 1)) as tar:
                tar.extractall(root, filter="fully_trusted")
        found[entry["platform"]["architecture"]] = (config, root)
    return found


def elf_machine(path: pathlib.Path) -> int | None:
    with path.open("rb") as file:
        head = file.read(20)
    return int.from_bytes(head[18:20], "little") if head[:4] == b"\x7fELF" else None


def test_one_index_of_linux_amd64_and_arm64_tagged_with_the_version(layout):
    descriptor = layout.index_descriptor()
    assert descriptor["annotations"]["org.opencontainers.image.ref.name"] == VERSION
    platforms = [m["platform"] for m in layout.json(descriptor["digest"])["manifests"]]
    assert platforms == [
        {"architecture": "amd64", "os": "linux"},
        {"architecture": "arm64", "os": "linux", "variant": "v8"},
    ]


def test_every_native_file_is_built_for_its_platform(roots):
    """The interpreter, the libraries and every compiled wheel module (pip chose the platform's
    wheels), and the cross-compiled etcd-replay-apply."""
    for arch, (config, root) in roots.items():
        assert config["architecture"] == arch and config["os"] == "linux"
        machines = {}
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink() and (machine := elf_machine(path)) is not None:
                machines[path.relative_to(root).as_posix()] = machine
        wrong = {name: machine for name, machine in machines.items() if machine != ELF_MACHINE[arch]}
        assert not wrong, f"{arch}: {sorted(wrong)[:10]}"
        assert "usr/bin/python3.11" in machines and "usr/local/bin/etcd-replay-apply" in machines
        assert any(name.startswith("usr/local/lib/python3.11/dist-packages/grpc/") for name in machines)


def test_each_platform_is_distroless_and_runs_as_non_root(roots):
    for arch, (config, root) in roots.items():
        assert config["config"]["User"] == "65532:65532"
        assert config["config"]["Entrypoint"] == ["python", "-m", "etcd_operator"]
        for program in ("bin/sh", "bin/bash", "usr/bin/dpkg", "usr/bin/apt-get", "bin/tar"):
            assert not (root / program).exists() and not (root / program).is_symlink(), (arch, program)
        packages = {p.name for p in (root / "var/lib/dpkg/status.d").iterdir()}
        assert "python3.11-minimal" in packages and "dpkg" not in packages, arch


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="runs the amd64 image's own interpreter")
def test_the_amd64_image_starts_the_operator_as_its_user(roots):
    config, root = roots["amd64"]
    uid, gid = config["config"]["User"].split(":")
    chroot = shutil.which("chroot") or "/usr/sbin/chroot"
    command = [chroot, f"--userspec={uid}:{gid}", str(root), *config["config"]["Entrypoint"], "--help"]
    if os.geteuid() != 0:
        command = [shutil.which("unshare") or "/usr/bin/unshare", "--map-root-user", *command]
    env = dict(e.split("=", 1) for e in config["config"]["Env"])
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0 and result.stdout.startswith("usage: python -m etcd_operator"), result.stderr


def test_the_provenance_names_the_image_the_commit_and_every_debian_package(out, layout, roots):
    statement = json.loads((out / PROVENANCE).read_text())
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
    index = layout.index_descriptor()["digest"]
    platform_digests = [m["digest"] for m in layout.json(index)["manifests"]]
    assert [f"sha256:{s['digest']['sha256']}" for s in statement["subject"]] == [index, *platform_digests]
    commit = subprocess.check_output(["git", "-C", str(ROOT), "rev-parse", "HEAD"], text=True).strip()
    build = statement["predicate"]["buildDefinition"]
    assert build["externalParameters"]["source"]["digest"] == {"gitCommit": commit}
    recorded = {d["uri"] for d in build["resolvedDependencies"]}
    for _, root in roots.values():
        for control in (root / "var/lib/dpkg/status.d").iterdir():
            fields = dict(line.split(": ", 1) for line in control.read_text().splitlines() if ": " in line)
            assert f"pkg:deb/debian/{control.name}@{fields['Version']}?arch={fields['Architecture']}" in recorded


def test_the_provenance_is_attached_to_the_index_as_an_artifact(out, layout):
    index = layout.index_descriptor()
    (attached,) = [m for m in layout.top["manifests"] if m.get("artifactType") == "application/vnd.in-toto+json"]
    manifest = layout.json(attached["digest"])
    assert manifest["subject"] == {k: index[k] for k in ("mediaType", "digest", "size")}
    (layer,) = manifest["layers"]
    assert layer["digest"] == f"sha256:{sha256(out / PROVENANCE)}"
