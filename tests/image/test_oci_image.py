"""The OCI image `make image` builds (packaging/image/build.sh, cached by input hash; the
release image's build for this machine's architecture): its config says what the Dockerfile
says, the operator starts from its root filesystem, and that filesystem is distroless."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import tarfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Found on the host's PATH: the commands below run with the image's environment.
CHROOT = shutil.which("chroot") or "/usr/sbin/chroot"
UNSHARE = shutil.which("unshare") or "/usr/bin/unshare"
pytestmark = pytest.mark.skipif(
    not (shutil.which("mmdebstrap") and shutil.which("dpkg-deb")),
    reason="make image needs mmdebstrap (apt-get install mmdebstrap)",
)


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> tuple[dict, pathlib.Path]:
    """The image's config and its unpacked root filesystem."""
    build = subprocess.run(
        [str(ROOT / "packaging" / "image" / "build.sh")],
        capture_output=True,
        text=True,
        timeout=1500,
        env={**os.environ, "PYTHON": str(ROOT / ".venv" / "bin" / "python")},
    )
    assert build.returncode == 0, build.stderr
    archive = pathlib.Path(build.stdout.strip().splitlines()[-1])
    layout = tmp_path_factory.mktemp("oci")
    with tarfile.open(archive) as tar:
        tar.extractall(layout, filter="tar")

    def blob(digest: str):
        return layout / "blobs" / digest.replace(":", "/", 1)

    top = json.loads((layout / "index.json").read_text())
    index = json.loads(blob(top["manifests"][0]["digest"]).read_text())
    assert index["mediaType"] == "application/vnd.oci.image.index.v1+json"
    (entry,) = index["manifests"]
    manifest = json.loads(blob(entry["digest"]).read_text())
    config = json.loads(blob(manifest["config"]["digest"]).read_text())
    rootfs = tmp_path_factory.mktemp("rootfs")
    for layer in manifest["layers"]:
        with tarfile.open(blob(layer["digest"])) as tar:
            tar.extractall(rootfs, filter="fully_trusted")
    return config, rootfs


def dockerfile_says(instruction: str) -> str:
    lines = [line for line in (ROOT / "Dockerfile").read_text().splitlines() if line.startswith(instruction + " ")]
    return lines[-1].split(" ", 1)[1]


def test_config_runs_as_the_dockerfiles_non_root_user_with_its_entrypoint(image):
    config, _ = image
    user = config["config"]["User"]
    assert user == dockerfile_says("USER") and not user.startswith("0") and user.split(":")[0] != "root"
    assert (
        config["config"]["Entrypoint"] == json.loads(dockerfile_says("ENTRYPOINT")) == ["python", "-m", "etcd_operator"]
    )
    assert "8080/tcp" in config["config"]["ExposedPorts"]


def test_python_version_matches_the_dockerfile_base(image):
    _, rootfs = image
    base = re.search(r"python:(\d+\.\d+)", dockerfile_says("FROM")).group(1)
    assert list((rootfs / "usr" / "lib").glob(f"python{base}")), f"no Python {base} in the image"


def test_the_operator_answers_help_from_the_unpacked_root_filesystem_as_its_user(image):
    config, rootfs = image
    uid, gid = config["config"]["User"].split(":")
    command = [CHROOT, f"--userspec={uid}:{gid}", str(rootfs), *config["config"]["Entrypoint"], "--help"]
    if os.geteuid() != 0:
        command = [UNSHARE, "--map-root-user", *command]
    env = dict(e.split("=", 1) for e in config["config"]["Env"])
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: python -m etcd_operator"), result.stdout


def test_every_operator_module_imports_inside_the_image(image):
    """--help imports kopf and aiohttp only; the handlers pull in the Kubernetes client and
    aetcd/grpc too. boto3 and botocore load at the first S3 operation (storage/s3.py), so
    they are imported here by name."""
    config, rootfs = image
    uid, gid = config["config"]["User"].split(":")
    command = [
        CHROOT,
        f"--userspec={uid}:{gid}",
        str(rootfs),
        "python",
        "-c",
        "import etcd_operator.runtime.operator, etcd_operator.programs.seed, boto3.session, botocore.config, "
        "botocore.exceptions; print('ok')",
    ]
    if os.geteuid() != 0:
        command = [UNSHARE, "--map-root-user", *command]
    env = dict(e.split("=", 1) for e in config["config"]["Env"])
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_the_replays_writer_runs_inside_the_image_and_refuses_a_missing_backend(image):
    """etcd-replay-apply (cmd/etcd-replay-apply), which the replay pod's apply container
    runs from PATH (clients/etcd/backend_apply.APPLY_PROGRAM), is in the image, static."""
    config, rootfs = image
    uid, gid = config["config"]["User"].split(":")
    command = [CHROOT, f"--userspec={uid}:{gid}", str(rootfs), "etcd-replay-apply", "/nonexistent/db"]
    if os.geteuid() != 0:
        command = [UNSHARE, "--map-root-user", *command]
    env = dict(e.split("=", 1) for e in config["config"]["Env"])
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 2 and "/nonexistent/db" in result.stderr, (result.returncode, result.stderr)
    assert "/out/etcd-replay-apply /usr/local/bin/etcd-replay-apply" in (ROOT / "Dockerfile").read_text()


def test_the_image_ships_bytecode_its_interpreter_can_use(image):
    """The root filesystem is read-only and PYTHONDONTWRITEBYTECODE is set, so a module
    without current bytecode is compiled in memory at every start (about 26 MiB more RSS)."""
    config, rootfs = image
    uid, gid = config["config"]["User"].split(":")
    check = (
        "import importlib.util, sys, etcd_operator.runtime.operator, kopf, kubernetes_asyncio.client\n"
        "stale = [n for n, m in list(sys.modules.items()) if getattr(m, '__file__', None)"
        " and m.__file__.endswith('.py') and '/dist-packages/' in m.__file__"
        " and not __import__('os').path.exists(importlib.util.cache_from_source(m.__file__))]\n"
        "print(len(sys.modules), stale[:5])"
    )
    command = [CHROOT, f"--userspec={uid}:{gid}", str(rootfs), "python", "-c", check]
    if os.geteuid() != 0:
        command = [UNSHARE, "--map-root-user", *command]
    env = dict(e.split("=", 1) for e in config["config"]["Env"])
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("[]"), f"modules without bytecode: {result.stdout}"


def test_the_root_filesystem_has_no_shell_and_no_package_manager(image):
    """Distroless: Debian's packages extracted without their scripts, and only the closure of
    python3.11's dependencies; what apt brought for an alternative (dpkg, tar) is gone."""
    _, rootfs = image
    for program in ("bin/sh", "bin/bash", "bin/dash", "usr/bin/dpkg", "usr/bin/apt", "bin/tar", "usr/bin/perl"):
        assert not (rootfs / program).exists() and not (rootfs / program).is_symlink(), program
    executables = sorted(
        p.relative_to(rootfs).as_posix()
        for directory in ("bin", "sbin", "usr/bin", "usr/sbin", "usr/local/bin")
        if (rootfs / directory).is_dir()
        for p in (rootfs / directory).iterdir()
    )
    assert executables == ["usr/bin/python", "usr/bin/python3", "usr/bin/python3.11", "usr/local/bin/etcd-replay-apply"]


def test_each_debian_package_in_the_image_is_recorded_for_scanners(image):
    """/var/lib/dpkg/status.d/<package> (the distroless layout), which SBOM and vulnerability
    scanners read: every shared library the interpreter loads comes from a recorded package."""
    _, rootfs = image
    recorded = {p.name: p.read_text() for p in (rootfs / "var/lib/dpkg/status.d").iterdir()}
    assert {"python3.11-minimal", "libpython3.11-stdlib", "libc6", "libssl3", "libstdc++6"} <= set(recorded)
    assert not {"dpkg", "tar"} & set(recorded)
    for name, control in recorded.items():
        assert f"Package: {name}\n" in control and "\nVersion: " in control
