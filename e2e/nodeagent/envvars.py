"""Container environments: envFrom, env (literal with $(VAR) expansion, fieldRef,
resourceFieldRef, secretKeyRef, configMapKeyRef), and $(VAR) expansion in command/args."""

from __future__ import annotations

from collections.abc import Callable

from nodeagent import fieldpaths
from nodeagent.configdata import ConfigData


class ConfigError(Exception):
    """The container cannot be configured yet (reported as CreateContainerConfigError)."""


def expand(text: str, lookup: Callable[[str], str | None]) -> str:
    """Kubernetes' $(VAR) expansion: unknown references stay as written, `$$` is `$`."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        if text[i] != "$" or i + 1 == n:
            out.append(text[i])
            i += 1
            continue
        following = text[i + 1]
        if following == "$":
            out.append("$")
            i += 2
        elif following == "(":
            close = text.find(")", i + 2)
            if close == -1:
                out.append("$(")
                i += 2
            else:
                name = text[i + 2 : close]
                value = lookup(name)
                out.append(f"$({name})" if value is None else value)
                i = close + 1
        else:
            out.append("$" + following)
            i += 2
    return "".join(out)


def expand_all(items: list[str] | None, env: dict[str, str]) -> list[str] | None:
    if items is None:
        return None
    return [expand(item, env.get) for item in items]


async def container_env(pod: dict, container: dict, data: ConfigData, base: dict[str, str]) -> dict[str, str]:
    env = dict(base)
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix") or ""
        if "configMapRef" in source:
            ref = source["configMapRef"]
            values = await data.configmap(ref["name"])
            what = f'configmap "{ref["name"]}"'
        elif "secretRef" in source:
            ref = source["secretRef"]
            values = await data.secret(ref["name"])
            what = f'secret "{ref["name"]}"'
        else:
            continue
        if values is None:
            if ref.get("optional"):
                continue
            raise ConfigError(f"{what} not found")
        for key, value in values.items():
            name = prefix + key
            if name and "=" not in name:
                env[name] = value.decode(errors="replace")
    for var in container.get("env") or []:
        name = var["name"]
        source = var.get("valueFrom")
        if source is None:
            env[name] = expand(var.get("value") or "", env.get)
            continue
        value = await _value_from(pod, container, source, data)
        if value is not None:
            env[name] = value
    return env


async def _value_from(pod: dict, container: dict, source: dict, data: ConfigData) -> str | None:
    try:
        if "fieldRef" in source:
            return fieldpaths.field_value(pod, source["fieldRef"]["fieldPath"])
        if "resourceFieldRef" in source:
            ref = source["resourceFieldRef"]
            target = container
            if ref.get("containerName"):
                target = next((c for c in pod["spec"]["containers"] if c["name"] == ref["containerName"]), container)
            return fieldpaths.resource_value(target, ref["resource"], ref.get("divisor"))
    except fieldpaths.FieldError as e:
        raise ConfigError(str(e)) from None
    for field, kind in (("secretKeyRef", "secret"), ("configMapKeyRef", "configmap")):
        if field in source:
            ref = source[field]
            values = await (data.secret(ref["name"]) if kind == "secret" else data.configmap(ref["name"]))
            if values is None or ref["key"] not in values:
                if ref.get("optional"):
                    return None
                if values is None:
                    raise ConfigError(f'{kind} "{ref["name"]}" not found')
                raise ConfigError(
                    f"couldn't find key {ref['key']} in {kind.capitalize()} {data.namespace}/{ref['name']}"
                )
            return values[ref["key"]].decode(errors="replace")
    raise ConfigError(f"unsupported env source {sorted(source)}")
