"""Wildcard listen addresses become the pod's IP.

Pods share the host's network, so a container that binds 0.0.0.0 would take the port on
every address of the machine. Inside a real pod a wildcard means "every address of this
pod", which here is the pod IP alone; rewriting the address to it gives the same isolation.
The rewrite applies to the container's command, args and environment values:

- `0.0.0.0` standing alone as an address (`0.0.0.0`, `0.0.0.0:8080`, `http://0.0.0.0:2379`);
  not a CIDR such as `0.0.0.0/0`;
- `[::]` (`http://[::]:2380`, `[::]:8080`) and a bare `::` value;
- an empty host before a port: a whole value `:8080` (Go's "all interfaces"), a flag
  value `--addr=:8080`, or a URL `http://:2379`.

What a program binds without saying so (a default in its code) cannot be seen here; see
`images.ImageRuntime.pod_ip_env` for the images whose defaults are known.
"""

from __future__ import annotations

import re

_IPV4_ANY = re.compile(r"(?<![\w.])0\.0\.0\.0(?![\w./])")
_IPV6_ANY = re.compile(r"\[::\](?![\w])")
_BARE = re.compile(r"^(?P<flag>-{1,2}[\w.-]+=)?:(?P<port>\d{1,5})$")
_BARE_V6 = re.compile(r"^(?P<flag>-{1,2}[\w.-]+=)?::$")
_URL_NO_HOST = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.-]*://):(?P<port>\d{1,5})\b")


def bind_to_pod(value: str, pod_ip: str) -> str:
    """One argument or environment value with its wildcard addresses replaced by pod_ip."""
    if not pod_ip or not value:
        return value
    value = _IPV4_ANY.sub(pod_ip, value)
    value = _IPV6_ANY.sub(pod_ip, value)
    value = _URL_NO_HOST.sub(lambda m: f"{m['scheme']}{pod_ip}:{m['port']}", value)
    bare = _BARE.match(value)
    if bare:
        return f"{bare['flag'] or ''}{pod_ip}:{bare['port']}"
    bare_v6 = _BARE_V6.match(value)
    if bare_v6:
        return f"{bare_v6['flag'] or ''}{pod_ip}"
    return value


def bind_all_to_pod(values: list[str], pod_ip: str) -> list[str]:
    return [bind_to_pod(v, pod_ip) for v in values]


def env_bound_to_pod(env: dict[str, str], pod_ip: str) -> dict[str, str]:
    return {name: bind_to_pod(value, pod_ip) for name, value in env.items()}
