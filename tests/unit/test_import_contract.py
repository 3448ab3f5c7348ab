"""The layers hold: the pure core imports nothing above it and no I/O library. Checked by
import-linter, and by importing the core in a fresh interpreter where grpc, the Kubernetes
client, boto3 and kopf cannot load."""

from __future__ import annotations

import pathlib
import pkgutil
import shutil
import subprocess
import sys
import tomllib

import etcd_operator.core

ROOT = pathlib.Path(__file__).resolve().parents[2]
LINT_IMPORTS = pathlib.Path(sys.executable).with_name("lint-imports")


def _contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def _lint(root: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=root, capture_output=True, text=True)


def test_import_linter_contracts_hold():
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(_contracts())} kept, 0 broken" in result.stdout


def test_a_core_module_importing_a_client_breaks_the_layers(tmp_path):
    """A module falls under the contract by where it sits: a new core module that imports
    the Kubernetes client breaks it, with no list to update."""
    shutil.copytree(ROOT / "etcd_operator", tmp_path / "etcd_operator", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    (tmp_path / "etcd_operator" / "core" / "cluster" / "brand_new.py").write_text(
        "from etcd_operator.clients.kube import client\n"
    )
    result = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode != 0, result.stdout
    (layers,) = [c["name"] for c in _contracts() if c["type"] == "layers"]
    assert f"{layers} BROKEN" in result.stdout, result.stdout
    assert "etcd_operator.core.cluster.brand_new -> etcd_operator.clients.kube.client" in result.stdout


def test_pure_core_imports_with_io_clients_blocked():
    (contract,) = [c for c in _contracts() if c["type"] == "forbidden"]
    modules = [info.name for info in pkgutil.walk_packages(etcd_operator.core.__path__, prefix="etcd_operator.core.")]
    assert "etcd_operator.core.cluster.planner" in modules
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {contract['forbidden_modules']!r}:\n"
        "            raise ImportError('blocked in the pure core: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        f"for module in {modules!r}:\n"
        "    __import__(module)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
