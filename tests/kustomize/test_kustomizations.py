"""Every kustomization in the repository renders with each old kustomize and with the current
kubectl's, to the same objects. The old ones are those of the kubectl releases the docs support
(Kubernetes 1.30 on): 5.0 (kubectl 1.30; testbin's e2e/testbin/kustomize-5.0), 5.4 (kubectl
1.31; kustomize-5.4) and 5.5 (kubectl 1.32 and the Flux and Argo CD releases of that time;
kustomize). 5.5 panics on shapes later ones accept, such as two `$patch: delete` documents in
one patch file (issue 43). Rendering needs no cluster."""

from __future__ import annotations

import functools
import json
import pathlib
import shutil
import subprocess
from collections import Counter

import pytest
import yaml

from localkube import layout as localkube_layout

ROOT = pathlib.Path(__file__).resolve().parents[2]
KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
# An old kustomize's line -> its testbin recipe.
OLD_KUSTOMIZES = {"5.0": "kustomize-5.0", "5.4": "kustomize-5.4", "5.5": "kustomize"}
PANICS = "5.5"  # the line issue 43 found panicking on two deletes in one patch file
# Folders users apply by hand; if discovery misses them, it is discovery that is broken.
SHIPPED = ("deploy", "deploy-namespaced")


def kustomizations() -> list[str]:
    """Folders holding a kustomization, tracked or new (git's ignore rules keep .venv, build/
    and the substrate's state out), relative to the repository."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split("\0")
    found = {
        pathlib.PurePosixPath(p).parent.as_posix()
        for p in listed
        if pathlib.PurePosixPath(p).name in KUSTOMIZATION_FILES
    }
    return sorted(d for d in found if (ROOT / d).is_dir())


def old_kustomize(line: str) -> pathlib.Path:
    return localkube_layout.testbin_dir() / OLD_KUSTOMIZES[line] / "kustomize"


def kubectl() -> pathlib.Path:
    return localkube_layout.testbin_dir() / "kube" / "kubectl"


def run(*args: str | pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=120)


def render_old(folder: pathlib.Path, line: str) -> subprocess.CompletedProcess:
    return run(old_kustomize(line), "build", folder)


@functools.cache  # each folder is compared with every old kustomize
def render_current(folder: pathlib.Path) -> subprocess.CompletedProcess:
    return run(kubectl(), "kustomize", folder)


def objects(rendered: str) -> Counter[str]:
    """The rendered objects, each as canonical JSON (key order and document order ignored)."""
    return Counter(json.dumps(doc, sort_keys=True) for doc in yaml.safe_load_all(rendered) if doc)


def named(documents: Counter[str]) -> list[str]:
    return sorted(
        f"{doc['kind']} {doc['metadata'].get('namespace', '-')}/{doc['metadata']['name']}"
        for doc in map(json.loads, documents.elements())
    )


@pytest.mark.parametrize("line", OLD_KUSTOMIZES)
def test_each_old_kustomize_is_of_its_line_and_kubectls_is_newer(line):
    old = run(old_kustomize(line), "version")
    assert old.returncode == 0, old.stderr
    assert old.stdout.strip().startswith(f"v{line}."), old.stdout
    current = run(kubectl(), "version", "--client", "-o", "json")
    assert current.returncode == 0, current.stderr
    current_version = json.loads(current.stdout)["kustomizeVersion"]
    assert not current_version.startswith(tuple(f"v{old}." for old in OLD_KUSTOMIZES)), current_version


def test_discovery_finds_the_shipped_kustomizations():
    assert set(SHIPPED) <= set(kustomizations())


@pytest.mark.parametrize("line", OLD_KUSTOMIZES)
@pytest.mark.parametrize("folder", kustomizations())
def test_renders_the_same_objects_with_each_old_kustomize_and_kubectls(folder, line):
    current = render_current(ROOT / folder)
    assert current.returncode == 0, current.stderr
    old = render_old(ROOT / folder, line)
    # A panic's first line, not its goroutine dump.
    assert old.returncode == 0, f"kustomize {line} fails on {folder}/: {old.stderr.strip().splitlines()[:3]}"
    old_objects, current_objects = objects(old.stdout), objects(current.stdout)
    assert current_objects, f"{folder}/ renders nothing"
    assert named(old_objects - current_objects) == named(current_objects - old_objects) == [], (
        f"only with kustomize {line}: {named(old_objects - current_objects)}; "
        f"only with kubectl's: {named(current_objects - old_objects)}"
    )


def test_kustomize_5_5_still_fails_on_the_shape_issue_43_reported(tmp_path):
    """Two `$patch: delete` documents in one patch file: kubectl's kustomize drops both
    objects, the old one panics. Were it fixed in the pinned version, the tests above could
    no longer catch an overlay of that shape."""
    (tmp_path / "objects.yaml").write_text(
        yaml.safe_dump_all(
            [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}} for name in ("a", "b", "kept")]
        )
    )
    (tmp_path / "drop.yaml").write_text(
        yaml.safe_dump_all(
            [{"$patch": "delete", "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}} for name in "ab"]
        )
    )
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": ["objects.yaml"], "patches": [{"path": "drop.yaml"}]})
    )
    current = render_current(tmp_path)
    assert current.returncode == 0, current.stderr
    assert named(objects(current.stdout)) == ["ConfigMap -/kept"]
    old = render_old(tmp_path, PANICS)
    assert old.returncode != 0
    assert "panic" in old.stderr


def test_deploy_namespaced_with_its_deletes_in_one_file_fails_with_kustomize_5_5(tmp_path):
    """The overlay as it was before it split its deletes (one patch file per deleted object):
    the old kustomize refuses it, so the parametrized test would have caught it."""
    for folder in ("crds", "deploy", "deploy-namespaced"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    overlay = tmp_path / "deploy-namespaced"
    kustomization = yaml.safe_load((overlay / "kustomization.yaml").read_text())
    deleting = [
        p for p in kustomization["patches"] if "path" in p and "$patch: delete" in (overlay / p["path"]).read_text()
    ]
    assert len(deleting) >= 2, "deploy-namespaced/ no longer drops two objects by patch files"
    (overlay / "deletes.yaml").write_text("---\n".join((overlay / p["path"]).read_text() for p in deleting))
    kustomization["patches"] = [{"path": "deletes.yaml"}] + [p for p in kustomization["patches"] if p not in deleting]
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))

    current = render_current(overlay)
    assert current.returncode == 0, current.stderr
    assert objects(current.stdout) == objects(render_current(ROOT / "deploy-namespaced").stdout)
    old = render_old(overlay, PANICS)
    assert old.returncode != 0
    assert "panic" in old.stderr
