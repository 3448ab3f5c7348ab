"""The files of the kubectl-etcd wheel: etcd_operator_kubectl and, followed through every import
statement (also those inside functions), the modules of etcd_operator it reaches, with the
__init__.py of each package on the way. Prints repository-relative paths, sorted.

    python packaging/kubectl-etcd/modules.py [ROOT]
"""

from __future__ import annotations

import ast
import pathlib
import sys

OWN = ("etcd_operator", "etcd_operator_kubectl")


def module_file(root: pathlib.Path, name: str) -> pathlib.Path | None:
    base = root.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imported_names(path: pathlib.Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {n for n in names if n.split(".")[0] in OWN}


def closure(root: pathlib.Path) -> list[str]:
    files: set[pathlib.Path] = set((root / "etcd_operator_kubectl").glob("*.py"))
    todo = list(files)
    while todo:
        for name in imported_names(todo.pop()):
            parts = name.split(".")
            for depth in range(1, len(parts) + 1):
                found = module_file(root, ".".join(parts[:depth]))
                if found and found not in files:
                    files.add(found)
                    todo.append(found)
    return sorted(str(f.relative_to(root)) for f in files)


if __name__ == "__main__":
    print("\n".join(closure(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve())))
