"""What kubectl-etcd may touch: the API server's view of the operator's objects, never the
object store, and one Secret: the client certificate `kubectl etcd etcdctl` connects with. Its
users need no S3 credentials, and no `get secrets` but on that Secret."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import etcd_operator_kubectl

PLUGIN = pathlib.Path(etcd_operator_kubectl.__file__).parent
ROOT = PLUGIN.parent
STORE_LIBRARIES = {"boto3", "botocore", "s3transfer", "aiobotocore"}


def modules() -> list[pathlib.Path]:
    found = sorted(PLUGIN.glob("*.py"))
    assert {p.name for p in found} >= {"cli.py", "access.py", "views.py", "report.py"}
    return found


def imported(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):  # every import, also those inside functions
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_no_plugin_module_imports_an_object_store_client():
    for path in modules():
        roots = {name.split(".")[0] for name in imported(ast.parse(path.read_text()))}
        assert not roots & STORE_LIBRARIES, f"{path.name} imports {roots & STORE_LIBRARIES}"
        storage = {n for n in imported(ast.parse(path.read_text())) if n.startswith("etcd_operator.clients.storage.s3")}
        assert not storage, f"{path.name} imports {storage}"


def secret_reads(tree: ast.AST) -> set[str]:
    """The Kubernetes client's Secret calls a module makes (read_namespaced_secret, ...)."""
    called = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    return {name for name in called if "secret" in name.lower() and ("namespaced" in name or "for_all" in name)}


def test_exactly_one_secret_is_read_by_name_and_only_by_the_etcdctl_command():
    """Kube.client_secret (access.py) reads one Secret by name; cli.cmd_etcdctl is its one
    caller, with the name etcdctl.identity chose; no module lists Secrets or calls another."""
    for path in modules():
        tree = ast.parse(path.read_text())
        assert secret_reads(tree) == ({"read_namespaced_secret"} if path.name == "access.py" else set()), path.name
        callers = {
            function.name
            for function in ast.walk(tree)
            if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
            and any(isinstance(n, ast.Attribute) and n.attr == "client_secret" for n in ast.walk(function))
        }
        if path.name == "cli.py":
            assert callers == {"cmd_etcdctl"}
            body = ast.get_source_segment(
                path.read_text(),
                next(f for f in ast.walk(tree) if isinstance(f, ast.AsyncFunctionDef) and f.name == "cmd_etcdctl"),
            )
            assert "kube.client_secret(namespace, who.secret)" in body and "etcdctl.identity(" in body
        elif path.name != "access.py":
            assert callers == set(), path.name


def test_every_command_runs_with_the_object_store_libraries_absent():
    """Transitively too: the plugin's modules load, and its commands parse, where boto3 and
    botocore cannot be imported (its own distribution ships without them)."""
    code = (
        "import sys\n"
        "for name in ('boto3', 'botocore', 's3transfer'):\n"
        "    sys.modules[name] = None\n"
        "from etcd_operator_kubectl import access, cli, report, views\n"
        "for command in cli.COMMANDS:\n"
        "    assert command in cli.parser()._subparsers._group_actions[0].choices\n"
        "assert not {'boto3', 'botocore'} & {m for m in sys.modules if sys.modules[m] is not None}\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
