"""docs/reference/fields.md is generated from crds/ by hack/crd_reference.py; it must match
what the generator renders from the CRDs as they are now."""

from __future__ import annotations

from tests.support import hack_scripts


def _generator():
    return hack_scripts.load("crd_reference")


def test_the_committed_field_reference_is_current():
    generator = _generator()
    rendered = generator.render()
    committed = generator.OUTPUT.read_text() if generator.OUTPUT.exists() else ""
    assert committed == rendered, (
        "docs/reference/fields.md is stale: the CRDs in crds/ changed since it was generated. "
        "Run `make docs` and commit the result."
    )


def _fields(schema, path=""):
    for name, sub in (schema.get("properties") or {}).items():
        here = f"{path}.{name}" if path else name
        yield here
        yield from _fields(sub, here)
        if isinstance(sub.get("items"), dict):
            yield from _fields(sub["items"], f"{here}[]")


def test_every_crd_field_and_validation_message_is_in_the_reference():
    generator = _generator()
    page = generator.render()
    for kind, crd in generator.load_crds().items():
        assert f"## {kind}" in page
        version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
        root = version["schema"]["openAPIV3Schema"]
        for field in _fields(root):
            if field in ("apiVersion", "kind"):
                continue
            assert f"| `{field}` |" in page, f"{kind} field {field} is missing from the reference"
        for message in (m for messages in _rules(root) for m in messages):
            assert generator._cell(message).replace("\\|", "|") in page.replace("\\|", "|"), message


def _rules(schema):
    if isinstance(schema, dict):
        if "x-kubernetes-validations" in schema:
            yield [r["message"] for r in schema["x-kubernetes-validations"] if "message" in r]
        for value in schema.values():
            yield from _rules(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _rules(value)
