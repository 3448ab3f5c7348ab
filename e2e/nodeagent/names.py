"""Which names resolve to which addresses: pods by hostname.subdomain, Services by the
pods their selector matches (ready ones, or all with publishNotReadyAddresses). Each
name gets a `.svc` and a `.svc.cluster.local` form."""

from __future__ import annotations

from collections.abc import Iterable

CLUSTER_DOMAIN = "cluster.local"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"


def _both(name: str) -> tuple[str, str]:
    return f"{name}.svc", f"{name}.svc.{CLUSTER_DOMAIN}"


def pod_hostname(pod: dict) -> str:
    return pod["spec"].get("hostname") or pod["metadata"]["name"]


def records(
    pods: Iterable[dict],
    services: Iterable[dict],
    slices: Iterable[dict],
    pod_ips: dict[str, str] | None = None,
) -> dict[str, set[str]]:
    """pod_ips (uid -> IP) supplies addresses the agent knows before the API does."""
    pod_ips = pod_ips or {}
    out: dict[str, set[str]] = {}

    def add(name: str, ip: str) -> None:
        for form in _both(name):
            out.setdefault(form.lower(), set()).add(ip)

    for pod in pods:
        meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
        ip = pod_ips.get(meta["uid"]) or status.get("podIP")
        if not ip or not spec.get("subdomain") or status.get("phase") in ("Succeeded", "Failed"):
            continue
        add(f"{pod_hostname(pod)}.{spec['subdomain']}.{meta['namespace']}", ip)

    # The API server refuses loopback addresses in EndpointSlices, so kube-controller-
    # manager cannot publish ours: selector services are matched against pods here, and
    # EndpointSlices only count for services without a selector.
    live = [
        p
        for p in pods
        if (pod_ips.get(p["metadata"]["uid"]) or (p.get("status") or {}).get("podIP"))
        and not p["metadata"].get("deletionTimestamp")
        and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]
    slices_by_service: dict[tuple[str, str], list[dict]] = {}
    for s in slices:
        service = (s["metadata"].get("labels") or {}).get(SERVICE_NAME_LABEL)
        if service:
            slices_by_service.setdefault((s["metadata"]["namespace"], service), []).append(s)

    for service in services:
        meta, spec = service["metadata"], service.get("spec") or {}
        if spec.get("type") == "ExternalName":
            continue
        include_not_ready = bool(spec.get("publishNotReadyAddresses"))
        name = f"{meta['name']}.{meta['namespace']}"
        selector = spec.get("selector")
        if selector:
            for pod in live:
                labels = pod["metadata"].get("labels") or {}
                if (
                    pod["metadata"]["namespace"] == meta["namespace"]
                    and all(labels.get(k) == v for k, v in selector.items())
                    and (include_not_ready or _ready(pod))
                ):
                    add(name, pod_ips.get(pod["metadata"]["uid"]) or pod["status"]["podIP"])
            continue
        for s in slices_by_service.get((meta["namespace"], meta["name"]), []):
            if s.get("addressType", "IPv4") != "IPv4":
                continue
            for endpoint in s.get("endpoints") or []:
                ready = (endpoint.get("conditions") or {}).get("ready")
                if ready is False and not include_not_ready:
                    continue
                for ip in endpoint.get("addresses") or []:
                    add(name, ip)
    return out


def _ready(pod: dict) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions") or []
    )
