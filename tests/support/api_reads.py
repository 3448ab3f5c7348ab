"""kubectl's plain `get` answered in the test process: one connection pool and one discovery per
kubeconfig instead of a kubectl process per call. Tests poll every 0.5–1 s, and each kubectl
costs 0.05–0.07 s of CPU and its own discovery requests; this costs a GET.

Only the shape `get RESOURCE [NAME] [-n NS | -A] [-l SELECTOR] [--field-selector F]` is
answered here, returning what kubectl -o json prints (a List with each item's apiVersion and
kind for a collection, the object itself for a name). Anything else, and any resource name
that discovery does not map to exactly one resource, returns None: the caller runs kubectl.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from dataclasses import dataclass
from urllib.parse import quote

_FLAGS_WITH_VALUE = {
    "-n": "namespace",
    "--namespace": "namespace",
    "-l": "labelSelector",
    "--selector": "labelSelector",
    "--field-selector": "fieldSelector",
}


@dataclass(frozen=True)
class Query:
    resource: str
    name: str | None
    namespace: str | None
    all_namespaces: bool
    params: dict[str, str]


def parse_get(args: tuple[str, ...]) -> Query | None:
    """The query kubectl would run for `args` (without -o json), or None for any other shape."""
    if not args or args[0] != "get":
        return None
    positional: list[str] = []
    options: dict[str, str] = {}
    all_namespaces = False
    rest = list(args[1:])
    while rest:
        arg = rest.pop(0)
        if arg in ("-A", "--all-namespaces"):
            all_namespaces = True
        elif arg in _FLAGS_WITH_VALUE and rest:
            options[_FLAGS_WITH_VALUE[arg]] = rest.pop(0)
        elif "=" in arg and arg.split("=", 1)[0] in _FLAGS_WITH_VALUE:
            flag, value = arg.split("=", 1)
            options[_FLAGS_WITH_VALUE[flag]] = value
        elif arg.startswith("-"):
            return None
        else:
            positional.append(arg)
    if not 1 <= len(positional) <= 2 or "," in positional[0] or "/" in positional[0]:
        return None
    namespace = options.pop("namespace", None)
    if all_namespaces and (namespace or len(positional) == 2):
        return None
    return Query(positional[0], positional[1] if len(positional) == 2 else None, namespace, all_namespaces, options)


@dataclass(frozen=True)
class Resource:
    group_version: str  # "v1" or "group/version"
    plural: str
    kind: str
    namespaced: bool
    aliases: frozenset[str]  # what kubectl accepts for it: plural, singular, kind, short names

    def in_group(self, group: str) -> bool:
        """kubectl takes a group's leading part too (`deployments.apps`, `etcdclusters.etcd`)."""
        full = self.group_version.rpartition("/")[0]
        return not group or full == group or full.startswith(group + ".")

    def path(self, namespace: str | None, name: str | None) -> str:
        base = "/api/v1" if self.group_version == "v1" else f"/apis/{self.group_version}"
        scope = f"/namespaces/{quote(namespace, safe='')}" if namespace else ""
        return f"{base}{scope}/{self.plural}" + (f"/{quote(name, safe='')}" if name else "")


class ApiReader:
    """Reads through the API server named by one kubeconfig, with the kubeconfig's credentials."""

    def __init__(self, kubeconfig: str):
        from kubernetes import config  # the client library loads kubeconfig's credentials

        self.api = config.new_client_from_config(config_file=kubeconfig)
        self._resources: list[Resource] | None = None
        self._lock = threading.Lock()

    def _get(self, path: str, params: dict[str, str] | None = None) -> tuple[int, dict]:
        from kubernetes.client.exceptions import ApiException

        try:
            response = self.api.call_api(
                path,
                "GET",
                query_params=list((params or {}).items()),
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
                _request_timeout=(10, 60),
            )
        except ApiException as refused:
            return refused.status, json.loads(refused.body or b"{}")
        return response.status, json.loads(response.data or b"{}")

    def _discover(self) -> list[Resource]:
        found: list[Resource] = []
        listings = [("v1", self._get("/api/v1")[1])]
        for group in self._get("/apis")[1].get("groups", []):
            version = group["preferredVersion"]["groupVersion"]
            listings.append((version, self._get(f"/apis/{version}")[1]))
        for group_version, listing in listings:
            for r in listing.get("resources", []):
                if "/" not in r["name"] and "get" in r.get("verbs", []):
                    aliases = {r["name"], r.get("singularName") or "", r["kind"].lower(), *r.get("shortNames", [])}
                    found.append(
                        Resource(group_version, r["name"], r["kind"], r["namespaced"], frozenset(aliases - {""}))
                    )
        return found

    def resource(self, token: str) -> Resource | None:
        """The one resource kubectl would pick for `token` (pods, pod, po, etcdcluster,
        deployments.apps), the core group first; None when unknown or ambiguous."""
        name, _, group = token.lower().partition(".")

        def matching(resources: list[Resource]) -> list[Resource]:
            return [r for r in resources if name in r.aliases and r.in_group(group)]

        with self._lock:
            known, fresh = (self._resources, False) if self._resources is not None else (self._discover(), True)
            matches = matching(known)
            if not matches and not fresh:  # a CRD may have come since
                known = self._discover()
                matches = matching(known)
            self._resources = known
        core = [r for r in matches if r.group_version == "v1"]
        if core:
            return core[0]
        return matches[0] if len({r.group_version for r in matches}) == 1 else None

    def get(self, query: Query, command: list[str]) -> dict | None:
        resource = self.resource(query.resource)
        if resource is None or (resource.namespaced and not query.namespace and not query.all_namespaces):
            return None
        namespace = query.namespace if resource.namespaced and not query.all_namespaces else None
        status, body = self._get(resource.path(namespace, query.name), query.params)
        if status >= 300:
            reason = body.get("reason") or "Unknown"
            message = body.get("message") or f"HTTP {status}"
            raise subprocess.CalledProcessError(1, command, "", f"Error from server ({reason}): {message}\n")
        if query.name:
            return body
        for item in body.get("items", []):
            item.setdefault("apiVersion", resource.group_version)
            item.setdefault("kind", resource.kind)
        return {"apiVersion": "v1", "items": body.get("items", []), "kind": "List", "metadata": {"resourceVersion": ""}}


_readers: dict[tuple[str, float], ApiReader] = {}
_readers_lock = threading.Lock()


def reader() -> ApiReader | None:
    """The reader for KUBECONFIG as it is now (tests point it at a cluster for a while)."""
    path = os.environ.get("KUBECONFIG")
    if not path or os.pathsep in path or not os.path.exists(path):
        return None
    key = (path, os.path.getmtime(path))
    with _readers_lock:
        if key not in _readers:
            _readers[key] = ApiReader(path)
        return _readers[key]
