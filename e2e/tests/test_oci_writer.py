"""The OCI archive writer (e2e/images/oci.py): layout shape, digests, reproducibility."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import pathlib
import tarfile

import pytest

from images import cache, oci

NAME = "example.test/tools/hello:1.2"
CONFIG = oci.Config(
    entrypoint=("/usr/local/bin/hello",),
    cmd=("--greet",),
    user="65532:65532",
    working_dir="/work",
    exposed_ports=("8080/tcp",),
)


@pytest.fixture
def program(tmp_path) -> pathlib.Path:
    path = tmp_path / "hello"
    path.write_bytes(b"#!/not/run\n" + bytes(range(256)))
    return path


def entries(program: pathlib.Path) -> list[oci.Entry]:
    return [
        oci.file("/usr/local/bin/hello", program),
        oci.text("etc/greeting", "hi\n"),
        oci.directory("tmp", mode=0o1777),
        oci.directory("home/nonroot", mode=0o700, uid=65532, gid=65532),
        oci.symlink("bin/hi", "/usr/local/bin/hello"),
    ]


def read_layout(archive: pathlib.Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {member.name: tar.extractfile(member).read() for member in tar.getmembers() if member.isfile()}


def blob(layout: dict[str, bytes], digest: str) -> bytes:
    return layout["blobs/" + digest.replace(":", "/", 1)]


def test_layout_index_names_the_image_for_containerd_and_oci(tmp_path, program):
    written = oci.write_archive(tmp_path / "a.tar", NAME, entries(program), CONFIG)
    layout = read_layout(written.archive)
    assert json.loads(layout["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads(layout["index.json"])
    [descriptor] = index["manifests"]
    assert descriptor["annotations"] == {"io.containerd.image.name": NAME, "org.opencontainers.image.ref.name": "1.2"}
    assert descriptor["mediaType"] == oci.MANIFEST_MEDIA_TYPE
    assert descriptor["digest"] == written.manifest_digest
    assert descriptor["platform"] == {"architecture": "amd64", "os": "linux"}


def test_every_blob_is_stored_under_its_digest_with_its_size(tmp_path, program):
    written = oci.write_archive(tmp_path / "a.tar", NAME, entries(program), CONFIG)
    layout = read_layout(written.archive)
    blobs = {name: data for name, data in layout.items() if name.startswith("blobs/")}
    assert len(blobs) == 3
    for name, data in blobs.items():
        assert name == "blobs/sha256/" + hashlib.sha256(data).hexdigest()
    manifest = json.loads(blob(layout, written.manifest_digest))
    for descriptor in [manifest["config"], *manifest["layers"]]:
        assert len(blob(layout, descriptor["digest"])) == descriptor["size"]


def test_config_carries_the_runtime_settings_and_the_layers_diff_id(tmp_path, program):
    written = oci.write_archive(tmp_path / "a.tar", NAME, entries(program), CONFIG)
    layout = read_layout(written.archive)
    config = json.loads(blob(layout, written.config_digest))
    assert config["os"] == "linux" and config["architecture"] == "amd64"
    assert config["config"]["Entrypoint"] == ["/usr/local/bin/hello"]
    assert config["config"]["Cmd"] == ["--greet"]
    assert config["config"]["User"] == "65532:65532"
    assert config["config"]["WorkingDir"] == "/work"
    assert config["config"]["ExposedPorts"] == {"8080/tcp": {}}
    assert config["config"]["Env"][0].startswith("PATH=")
    uncompressed = gzip.decompress(blob(layout, written.layer_digest))
    assert config["rootfs"] == {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(uncompressed).hexdigest()]}


def test_layer_holds_the_entries_with_their_modes_owners_and_parents(tmp_path, program):
    written = oci.write_archive(tmp_path / "a.tar", NAME, entries(program), CONFIG)
    layer = gzip.decompress(blob(read_layout(written.archive), written.layer_digest))
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        members = {member.name: member for member in tar.getmembers()}
        names = [member.name for member in tar.getmembers()]
        assert tar.extractfile("usr/local/bin/hello").read() == program.read_bytes()
    assert names == sorted(names)
    assert {"usr", "usr/local", "usr/local/bin", "etc", "bin", "home"} <= set(members)
    assert members["usr/local/bin/hello"].mode == 0o755 and members["usr/local/bin/hello"].uid == 0
    assert members["tmp"].isdir() and members["tmp"].mode == 0o1777
    assert (members["home/nonroot"].uid, members["home/nonroot"].gid) == (65532, 65532)
    assert members["bin/hi"].issym() and members["bin/hi"].linkname == "/usr/local/bin/hello"
    assert {member.mtime for member in members.values()} == {0}


def test_rebuilding_gives_the_same_bytes_and_a_change_gives_new_digests(tmp_path, program):
    first = oci.write_archive(tmp_path / "first.tar", NAME, entries(program), CONFIG)
    second = oci.write_archive(tmp_path / "second.tar", NAME, list(reversed(entries(program))), CONFIG)
    assert first.archive.read_bytes() == second.archive.read_bytes()
    program.write_bytes(program.read_bytes() + b"!")
    changed = oci.write_archive(tmp_path / "changed.tar", NAME, entries(program), CONFIG)
    assert changed.layer_digest != first.layer_digest and changed.manifest_digest != first.manifest_digest


def test_cache_key_follows_the_content_not_the_source_path(tmp_path, program, monkeypatch):
    monkeypatch.setenv("ETCD_OPERATOR_IMAGES", str(tmp_path / "cache"))
    copy = tmp_path / "elsewhere"
    copy.write_bytes(program.read_bytes())

    def key(path):
        return cache.archive_path(NAME, [oci.file("bin/hello", path).fingerprint()])

    assert key(program) == key(copy)
    assert key(program).parent == tmp_path / "cache"
    copy.write_bytes(b"other")
    assert key(program) != key(copy)


@pytest.mark.parametrize("path", ["", "/", "../etc/passwd", "a/../../b"])
def test_paths_outside_the_image_are_refused(path):
    with pytest.raises(ValueError):
        oci.text(path, "x")


def test_a_path_given_twice_is_refused(tmp_path):
    with pytest.raises(ValueError, match="twice"):
        oci.write_archive(tmp_path / "a.tar", NAME, [oci.text("a", "1"), oci.text("/a", "2")], CONFIG)


def test_a_name_without_tag_is_refused(tmp_path):
    with pytest.raises(ValueError, match="tag"):
        oci.write_archive(tmp_path / "a.tar", "localhost:5000/hello", [oci.text("a", "1")], CONFIG)


def test_extended_attributes_travel_as_pax_records(tmp_path, program):
    capability = b"\x01\x00\x00\x02\x00\x04\x00\x00" + bytes(12)
    entry = oci.file("coredns", program, xattrs=(("security.capability", capability),))
    written = oci.write_archive(tmp_path / "a.tar", NAME, [entry], CONFIG)
    layer = gzip.decompress(blob(read_layout(written.archive), written.layer_digest))
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        record = tar.getmember("coredns").pax_headers["SCHILY.xattr.security.capability"]
    assert record.encode("utf-8", "surrogateescape") == capability
