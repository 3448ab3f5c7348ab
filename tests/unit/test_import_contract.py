"""The pure core imports no I/O client: checked by import-linter, and by importing the
core in a fresh interpreter where grpc, the Kubernetes client, boto3 and kopf cannot load."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _contract() -> dict:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "forbidden"]
    return contract


def test_import_linter_contract_holds():
    lint = pathlib.Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 kept, 0 broken" in result.stdout


def test_pure_core_imports_with_io_clients_blocked():
    contract = _contract()
    blocked = [m for m in contract["forbidden_modules"] if not m.startswith("etcd_operator")]
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {blocked!r}:\n"
        "            raise ImportError('blocked in the pure core: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        f"for module in {contract['source_modules']!r}:\n"
        "    __import__(module)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
