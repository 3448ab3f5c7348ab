"""Renders every field of the CRDs in crds/ into docs/reference/fields.md.

    python hack/crd_reference.py            # write docs/reference/fields.md (what `make docs` runs)
    python hack/crd_reference.py --check    # exit 1 when the committed file differs

The CRDs are the source of truth: each field's path, type, default, limits (enum, bounds,
lengths, pattern, required), its description, and the messages of its CEL validation rules
come from the schema as written. tests/unit/test_docs_fields_reference.py renders it in
memory and fails when the committed page is stale. Standard library and pyyaml only.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
CRD_DIR = ROOT / "crds"
OUTPUT = ROOT / "docs" / "reference" / "fields.md"
# The order the page lists the kinds in, and where each kind's narrative page is.
KINDS = ("EtcdCluster", "EtcdBackup", "EtcdRestore")
NARRATIVE = {kind: f"{kind.lower()}.md" for kind in KINDS}
# Fields every object has, documented by Kubernetes itself.
SKIPPED_TOP_LEVEL = ("apiVersion", "kind")


def load_crds(crd_dir: Path = CRD_DIR) -> dict[str, dict[str, Any]]:
    """The CRDs in crd_dir by kind, in file-name order (kustomization.yaml and others skipped)."""
    crds: dict[str, dict[str, Any]] = {}
    for path in sorted(crd_dir.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                crds[doc["spec"]["names"]["kind"]] = doc
    return crds


def _cell(text: Any) -> str:
    """One table cell of prose: on one line, pipes escaped for the table, and angle brackets
    written as entities so that `<name>` shows instead of being read as an HTML tag."""
    s = " ".join(str(text).split())
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


def _code_cell(text: str) -> str:
    """A cell made of code spans: only pipes are escaped (a backslash is literal in a code span)."""
    return text.replace("|", "\\|")


def _code(value: Any) -> str:
    if isinstance(value, (dict, list)):
        text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = value if value else '""'
    else:
        text = str(value)
    text = " ".join(text.split())
    # A backtick inside the value needs a longer fence.
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def type_of(schema: dict[str, Any]) -> str:
    if schema.get("x-kubernetes-int-or-string"):
        return "integer or string"
    t = schema.get("type")
    if t == "array":
        item = type_of(schema.get("items") or {})
        return f"array of {item}" if item else "array"
    if t == "object":
        if "additionalProperties" in schema and "properties" not in schema:
            value = schema["additionalProperties"]
            inner = type_of(value) if isinstance(value, dict) else "any"
            return f"map of {inner}"
        if schema.get("x-kubernetes-preserve-unknown-fields") and "properties" not in schema:
            return "object (any fields)"
        return "object"
    if t is None and schema.get("x-kubernetes-preserve-unknown-fields"):
        return "any"
    text = t or ""
    if schema.get("format"):
        text += f" ({schema['format']})"
    return text


def limits_of(schema: dict[str, Any], required: bool) -> str:
    parts: list[str] = []
    if required:
        parts.append("required")
    if "enum" in schema:
        parts.append("one of " + ", ".join(_code(v) for v in schema["enum"]))
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None:
        parts.append(("> " if schema.get("exclusiveMinimum") else "≥ ") + str(low))
    if high is not None:
        parts.append(("< " if schema.get("exclusiveMaximum") else "≤ ") + str(high))
    for key, label in (
        ("minLength", "length ≥"),
        ("maxLength", "length ≤"),
        ("minItems", "items ≥"),
        ("maxItems", "items ≤"),
        ("minProperties", "keys ≥"),
        ("maxProperties", "keys ≤"),
    ):
        if key in schema:
            parts.append(f"{label} {schema[key]}")
    if "pattern" in schema:
        parts.append("pattern " + _code(schema["pattern"]))
    if schema.get("nullable"):
        parts.append("nullable")
    if schema.get("x-kubernetes-list-type"):
        keys = schema.get("x-kubernetes-list-map-keys")
        parts.append(f"list type {schema['x-kubernetes-list-type']}" + (f" (keys {', '.join(keys)})" if keys else ""))
    return "; ".join(parts)


def rules_of(schema: dict[str, Any]) -> list[str]:
    """The messages of a schema's CEL rules (the rule itself when it has no message)."""
    messages = []
    for rule in schema.get("x-kubernetes-validations") or []:
        if "message" in rule:
            messages.append(rule["message"])
        elif "messageExpression" in rule:
            messages.append(f"(computed) {rule['messageExpression']}")
        else:
            messages.append(f"rule: {rule['rule']}")
    return messages


def walk(schema: dict[str, Any], path: str, required: bool) -> Iterator[tuple[str, dict[str, Any], bool]]:
    """Every field below (and including) schema, depth first in the order the CRD writes them."""
    yield path, schema, required
    props = schema.get("properties") or {}
    needed = set(schema.get("required") or [])
    for name, sub in props.items():
        yield from walk(sub, f"{path}.{name}" if path else name, name in needed)
    items = schema.get("items")
    if isinstance(items, dict) and (
        items.get("properties") or items.get("items") or items.get("x-kubernetes-validations")
    ):
        yield from walk(items, f"{path}[]", False)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict) and (extra.get("properties") or extra.get("x-kubernetes-validations")):
        yield from walk(extra, f"{path}.<key>", False)


def render_kind(crd: dict[str, Any]) -> list[str]:
    spec = crd["spec"]
    names = spec["names"]
    version = next(v for v in spec["versions"] if v.get("storage"))
    root = version["schema"]["openAPIV3Schema"]
    kind = names["kind"]
    out = [f"## {kind}", ""]
    facts = [
        f"`{spec['group']}/{version['name']}`",
        f"{spec['scope'].lower()}",
        f"plural `{names['plural']}`",
    ]
    if names.get("shortNames"):
        facts.append("short names " + ", ".join(f"`{n}`" for n in names["shortNames"]))
    subresources = sorted((version.get("subresources") or {}).keys())
    if subresources:
        facts.append("subresources " + ", ".join(f"`{s}`" for s in subresources))
    out.append(
        f"{_cell(root.get('description', ''))} ({'; '.join(facts)}). "
        f"Behaviour: [{NARRATIVE.get(kind, '')}]({NARRATIVE.get(kind, '')})."
    )
    out.append("")
    columns = version.get("additionalPrinterColumns") or []
    if columns:
        out.append("`kubectl get` columns: " + ", ".join(f"{c['name']} (`{c['jsonPath']}`)" for c in columns) + ".")
        out.append("")
    top = rules_of(root)
    if top:
        out.append("Rules on the whole object:")
        out.append("")
        out.extend("- " + _cell(m).replace("\\|", "|") for m in top)
        out.append("")
    out.append("| field | type | default | limits | description | validation messages |")
    out.append("|---|---|---|---|---|---|")
    needed = set(root.get("required") or [])
    for name, sub in (root.get("properties") or {}).items():
        if name in SKIPPED_TOP_LEVEL:
            continue
        for path, schema, required in walk(sub, name, name in needed):
            default = _code(schema["default"]) if "default" in schema else ""
            messages = "<br>".join(_cell(m) for m in rules_of(schema))
            out.append(
                "| "
                + " | ".join(
                    [
                        f"`{path}`",
                        _cell(type_of(schema)),
                        _code_cell(default),
                        _code_cell(limits_of(schema, required)),
                        _cell(schema.get("description", "")),
                        messages,
                    ]
                )
                + " |"
            )
    out.append("")
    return out


def render(crd_dir: Path = CRD_DIR) -> str:
    crds = load_crds(crd_dir)
    kinds = [k for k in KINDS if k in crds] + sorted(k for k in crds if k not in KINDS)
    out = [
        "# Field reference",
        "",
        "<!-- Generated by hack/crd_reference.py from crds/. Do not edit: run `make docs`. -->",
        "",
        "Every field of the operator's custom resources, as the CRDs in `crds/` declare it: its "
        "type, default, limits and description, and the messages the API server returns when one "
        "of its validation rules (CEL) refuses a value. Paths are relative to the object; `[]` "
        "marks the items of a list, `<key>` the values of a map. Checks the operator makes at "
        "runtime, beyond the schema, are described on each kind's page.",
        "",
        "Kinds: " + ", ".join(f"[{k}](#{k.lower()})" for k in kinds) + ".",
        "",
    ]
    for kind in kinds:
        out.extend(render_kind(crds[kind]))
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="fail when the committed page differs")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is stale: run `make docs`", file=sys.stderr)
            return 1
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"wrote {args.output.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
