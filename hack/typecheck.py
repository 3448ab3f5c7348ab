"""mypy over the product: strict over the pure core (the package the import contracts in
pyproject.toml hold pure), normal mode over the rest."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ["etcd_operator", "etcd_operator_kubectl"]


def pure_core() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "forbidden"]
    return contract["source_modules"]  # packages: mypy checks every module in them


def mypy(*args: str) -> int:
    return subprocess.run([sys.executable, "-m", "mypy", *args], cwd=ROOT).returncode


def main() -> int:
    normal = mypy(*PACKAGES)
    strict = mypy("--strict", *(arg for module in pure_core() for arg in ("-p", module)))
    return normal or strict


if __name__ == "__main__":
    sys.exit(main())
