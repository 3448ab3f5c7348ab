"""README shows one example of each resource, each naming the file in examples/ it comes from:
what README shows is that file's object, so it passes the same server-side dry run
(tests/nodes/host_operator/control_plane/test_manifests.py)."""

from __future__ import annotations

import pathlib
import re

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = re.compile(r"\(`(examples/[\w.-]+\.yaml)`[^)]*\):?\s*\n\s*```yaml\n(.*?)```", re.DOTALL)


def shown_examples() -> list[tuple[str, dict]]:
    return [(path, yaml.safe_load(block)) for path, block in EXAMPLE.findall((ROOT / "README.md").read_text())]


def test_readme_shows_one_example_of_each_resource():
    assert sorted(shown["kind"] for _, shown in shown_examples()) == ["EtcdBackup", "EtcdCluster", "EtcdRestore"]


def test_each_example_in_readme_is_the_object_in_the_file_it_names():
    for path, shown in shown_examples():
        in_file = [doc for doc in yaml.safe_load_all((ROOT / path).read_text()) if doc]
        same_kind = [
            doc
            for doc in in_file
            if (doc["kind"], doc["metadata"]["name"]) == (shown["kind"], shown["metadata"]["name"])
        ]
        assert same_kind == [shown], f"README's example from {path} differs from the file"
