"""`make release` (packaging/release.sh): run twice into two folders, a second apart, it writes
the same bytes; the krew manifest names its archive's digest and the wheel's dependencies; the
plugin's wheel holds the plugin and the operator modules it imports, and runs without the
operator's own libraries; the packaged chart lints, renders with the release's image, and its
schema refuses a mistyped value."""

from __future__ import annotations

import ast
import os
import pathlib
import re
import subprocess
import sys
import tarfile
import zipfile

import pytest
import yaml

from tests.release.conftest import sha256
from tests.support.helm import helm
from tests.support.wheels import requires_dist

ROOT = pathlib.Path(__file__).resolve().parents[2]
VERSION = "0.1.0"
CHART = f"etcd-operator-{VERSION}.tgz"
WHEEL = f"kubectl_etcd-{VERSION}-py3-none-any.whl"
ARCHIVE = f"kubectl-etcd-{VERSION}.tar.gz"
OLM_BUNDLE = f"etcd-operator-olm-bundle-{VERSION}.tar.gz"
IMAGE = f"etcd-operator-{VERSION}.oci.tar"
PROVENANCE = f"etcd-operator-{VERSION}.provenance.json"
SBOMS = {f"etcd-operator-{VERSION}-linux-{arch}.spdx.json" for arch in ("amd64", "arm64")}
ARTIFACTS = {
    CHART,
    WHEEL,
    ARCHIVE,
    OLM_BUNDLE,
    IMAGE,
    PROVENANCE,
    *SBOMS,
    "krew.yaml",
    "requirements.lock",
    "SHA256SUMS",
}
# What the operator needs and the plugin must not: importing any of them fails in the wheel test.
OPERATOR_ONLY = ["kopf", "aetcd", "grpc", "croniter", "prometheus_client"]


def test_two_runs_write_the_same_artifacts_byte_for_byte(releases):
    first, second = releases
    assert {p.name for p in first.iterdir()} == ARTIFACTS
    assert {p.name: sha256(p) for p in first.iterdir()} == {p.name: sha256(p) for p in second.iterdir()}


def test_sha256sums_lists_every_other_artifact_with_its_digest(out):
    listed = dict(reversed(line.split("  ", 1)) for line in (out / "SHA256SUMS").read_text().splitlines())
    assert listed == {name: sha256(out / name) for name in ARTIFACTS - {"SHA256SUMS"}}


def test_tar_members_carry_no_owner_and_the_commits_time(out):
    commit_time = int(subprocess.check_output(["git", "-C", str(ROOT), "log", "-1", "--format=%ct"], text=True))
    for name in (CHART, ARCHIVE, OLM_BUNDLE):
        with tarfile.open(out / name) as archive:
            members = archive.getmembers()
        assert {(m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, "", "")}  # --numeric-owner
        assert {m.mtime for m in members} == {commit_time}
        assert [m.name for m in members] == sorted(m.name for m in members)


def test_the_krew_manifest_names_the_archive_by_its_digest(out):
    manifest = yaml.safe_load((out / "krew.yaml").read_text())
    assert manifest["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert manifest["kind"] == "Plugin"
    assert manifest["spec"]["version"] == f"v{VERSION}"
    (platform,) = manifest["spec"]["platforms"]
    assert platform["sha256"] == sha256(out / ARCHIVE)
    assert platform["uri"].endswith(f"/v{VERSION}/{ARCHIVE}")
    with tarfile.open(out / ARCHIVE) as archive:
        launcher = archive.getmember(f"./{platform['bin']}")
    assert launcher.isfile() and launcher.mode & 0o111


def wheel_files(out: pathlib.Path) -> list[str]:
    with zipfile.ZipFile(out / WHEEL) as wheel:
        return [n for n in wheel.namelist() if ".dist-info/" not in n]


def test_the_wheel_holds_the_plugin_and_only_the_operator_modules_it_imports(out):
    files = wheel_files(out)
    assert {f.split("/")[0] for f in files} == {"etcd_operator_kubectl", "etcd_operator"}
    imported = subprocess.check_output(
        [sys.executable, str(ROOT / "packaging" / "kubectl-etcd" / "modules.py"), str(ROOT)], text=True
    ).split()
    assert sorted(files) == sorted(imported)
    layers = {f.split("/")[1] for f in files if f.startswith("etcd_operator/") and f.count("/") > 1}
    assert layers <= {"core", "clients"}, "the plugin pulls in the operator's handlers or controllers"
    # Exactly the distributions its files import: none more (boto3 left with the S3 reads).
    assert required_distributions(out) == third_party_distributions(ROOT, imported)


def required_distributions(out: pathlib.Path) -> set[str]:
    """The wheel's Requires-Dist names, lower-case."""
    return {requirement.split("<")[0].split(">")[0].lower() for requirement in requires_dist(out / WHEEL)}


def test_the_krew_manifest_names_exactly_the_wheels_dependencies(out):
    description = yaml.safe_load((out / "krew.yaml").read_text())["spec"]["description"]
    named = description.split("dependencies of the kubectl-etcd wheel:", 1)[1].strip().removesuffix(".")
    assert {n.lower() for n in re.split(r",\s*|\s+and\s+", named)} == required_distributions(out), description
    assert "boto3" not in description


DISTRIBUTION_OF = {"yaml": "pyyaml"}


def third_party_distributions(root: pathlib.Path, files: list[str]) -> set[str]:
    tops: set[str] = set()
    for name in files:
        for node in ast.walk(ast.parse((root / name).read_text())):
            if isinstance(node, ast.Import):
                tops.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                tops.add(node.module.split(".")[0])
    own = {"etcd_operator", "etcd_operator_kubectl", "__future__"}
    return {DISTRIBUTION_OF.get(top, top) for top in tops - own - set(sys.stdlib_module_names)}


BLOCK_AND_RUN = """
import importlib, pathlib, sys
sys.path[:] = [sys.argv[1], *sys.path, *(p for p in sys.argv[2].split(":") if p)]
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ImportError("the plugin imported " + name)
sys.meta_path.insert(0, Refuse())
root = pathlib.Path(sys.argv[1])
for f in sorted(root.rglob("*.py")):
    module = ".".join(f.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
    assert importlib.import_module(module).__file__.startswith(sys.argv[1]), module
from etcd_operator_kubectl import cli
sys.exit(cli.main(["unseal", sys.argv[3], sys.argv[4]]))
"""


def test_the_wheel_runs_without_the_operator_and_its_libraries(out, tmp_path):
    """Unpacked alone, beside the site-packages (no .pth files, so not the editable operator),
    with kopf, aetcd, grpc, croniter and prometheus_client refused: every module imports and
    `unseal` (its lazily imported part) copies a plain snapshot."""
    unpacked = tmp_path / "wheel"
    with zipfile.ZipFile(out / WHEEL) as wheel:
        wheel.extractall(unpacked)
    site = [p for p in sys.path if p.endswith("site-packages")]
    plain, copy = tmp_path / "plain.db", tmp_path / "copy.db"
    plain.write_bytes(b"\x00etcd snapshot bytes" * 100)
    result = subprocess.run(
        [
            sys.executable,
            "-S",
            "-c",
            BLOCK_AND_RUN.format(blocked=set(OPERATOR_ONLY)),
            str(unpacked),
            ":".join(site),
            str(plain),
            str(copy),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "not sealed, copied as is" in result.stdout
    assert copy.read_bytes() == plain.read_bytes()


def test_the_krew_launcher_starts_the_plugin_from_its_archive(out, tmp_path):
    with tarfile.open(out / ARCHIVE) as archive:
        archive.extractall(tmp_path, filter="tar")
    result = subprocess.run(
        [str(tmp_path / "kubectl-etcd"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "KUBECTL_ETCD_PYTHON": sys.executable},
    )
    assert result.returncode == 0, result.stderr
    assert "unseal" in result.stdout


def test_the_packaged_chart_lints_and_renders_the_release_image(out):
    helm("lint", "--strict", str(out / CHART))
    objects = [d for d in yaml.safe_load_all(helm("template", "etcd-operator", str(out / CHART)).stdout) if d]
    (deployment,) = [d for d in objects if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"ghcr.io/etcd-operator/etcd-operator:{VERSION}"


def test_the_packaged_chart_refuses_kubernetes_older_than_1_30(out):
    old = helm("template", "etcd-operator", str(out / CHART), "--kube-version", "1.29.9", check=False)
    assert old.returncode != 0 and "kubeVersion" in old.stderr
    helm("template", "etcd-operator", str(out / CHART), "--kube-version", "1.30.0")


@pytest.mark.parametrize(
    ("value", "complaint"),
    [
        ("replcias=3", "additional properties 'replcias' not allowed"),
        ("image.tga=v1", "additional properties 'tga' not allowed"),
        ("monitoring.serviceMonitor.enable=true", "additional properties 'enable' not allowed"),
        ("replicas=three", "got string, want integer"),
        ("rbac.scope=namespace", "rbac/scope"),
    ],
)
def test_the_charts_schema_refuses_a_mistyped_value(out, value, complaint):
    result = helm("template", "etcd-operator", str(out / CHART), "--set", value, check=False)
    assert result.returncode != 0
    assert complaint in result.stderr


def test_the_olm_bundle_is_make_bundles_and_the_validators_accept_it(out, tmp_path):
    """The same files as `make bundle` writes from this tree (HEAD, unless edited), and the
    operator-framework validators that tests/olm runs accept the released copy."""
    from tests.olm.test_bundle import ACCEPTED_WARNINGS, validate

    with tarfile.open(out / OLM_BUNDLE) as archive:
        archive.extractall(tmp_path / "released", filter="data")
    subprocess.run(
        [sys.executable, str(ROOT / "hack" / "olm_bundle.py"), "--out", str(tmp_path / "made")],
        check=True,
        capture_output=True,
        timeout=120,
    )

    def files(folder: pathlib.Path) -> dict[str, str]:
        return {str(p.relative_to(folder)): sha256(p) for p in sorted(folder.rglob("*")) if p.is_file()}

    released = files(tmp_path / "released")
    assert {name.split("/", 1)[0] for name in released} == {"bundle.Dockerfile", "manifests", "metadata"}, released
    assert released == files(tmp_path / "made")
    result = validate(tmp_path / "released")
    assert result.returncode == 0 and f"bundle etcd-operator.v{VERSION} valid" in result.stdout, result.stdout
    findings = [line for line in result.stdout.splitlines() if line.startswith(("Error", "Warning"))]
    assert [line for line in findings if not any(reason in line for reason in ACCEPTED_WARNINGS)] == []
