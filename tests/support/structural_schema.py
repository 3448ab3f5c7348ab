"""An object checked against a CRD's structural openAPIV3Schema, as far as the API server's
schema validation goes without a server: types (with int-or-string), unknown fields (which
the server would prune without a word), required fields, enums, bounds, lengths, patterns and
item counts. Not checked: CEL rules (x-kubernetes-validations), formats and defaults; a
server-side dry-run on the real nodes checks those."""

from __future__ import annotations

import re
from typing import Any

TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def crd_schema(crd: dict[str, Any], version: str) -> dict[str, Any]:
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return served["schema"]["openAPIV3Schema"]


def violations(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """What the server would refuse or prune in value, one line per finding."""
    where = path or "<root>"
    if value is None:
        return [] if schema.get("nullable") else [f"{where}: null"]
    if schema.get("x-kubernetes-int-or-string"):
        if isinstance(value, bool) or not isinstance(value, int | str):
            return [f"{where}: {value!r} is neither an integer nor a string"]
    elif "type" in schema:
        expected = TYPES[schema["type"]]
        if isinstance(value, bool) and schema["type"] != "boolean" or not isinstance(value, expected):
            return [f"{where}: {value!r} is not of type {schema['type']}"]
    found = _bounds(value, schema, where)
    if isinstance(value, dict):
        found += _object(value, schema, path)
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            found += violations(item, schema["items"], f"{path}[{index}]")
    return found


def _bounds(value: Any, schema: dict[str, Any], where: str) -> list[str]:
    found = []
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            found.append(f"{where}: {value} is below {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            found.append(f"{where}: {value} is above {schema['maximum']}")
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            found.append(f"{where}: shorter than {schema['minLength']}")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            found.append(f"{where}: longer than {schema['maxLength']}")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            found.append(f"{where}: {value!r} does not match {schema['pattern']}")
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            found.append(f"{where}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            found.append(f"{where}: more than {schema['maxItems']} items")
    if isinstance(value, dict) and "maxProperties" in schema and len(value) > schema["maxProperties"]:
        found.append(f"{where}: more than {schema['maxProperties']} properties")
    return found


def _object(value: dict[str, Any], schema: dict[str, Any], path: str) -> list[str]:
    found = [f"{path or '<root>'}: {name} is required" for name in schema.get("required", []) if name not in value]
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    for name, item in value.items():
        child = f"{path}.{name}" if path else name
        if path == "" and name == "metadata":
            found += _metadata(item, properties.get("metadata", {}))
        elif name in properties:
            found += violations(item, properties[name], child)
        elif isinstance(extra, dict):
            found += violations(item, extra, child)
        elif extra is True or schema.get("x-kubernetes-preserve-unknown-fields"):
            continue
        elif path == "" and name in ("apiVersion", "kind", "metadata"):
            continue  # the server's own fields of every object
        else:
            found.append(f"{child}: unknown field (the server would prune it)")
    return found


def _metadata(value: Any, schema: dict[str, Any]) -> list[str]:
    """ObjectMeta is the server's: a CRD may only constrain name and generateName."""
    if not isinstance(value, dict):
        return [f"metadata: {value!r} is not an object"]
    properties = schema.get("properties", {})
    found = []
    for name, item in value.items():
        if name in properties:
            found += violations(item, properties[name], f"metadata.{name}")
    return found
