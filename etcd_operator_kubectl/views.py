"""Pure views: what each command shows, computed from the objects and manifests it read.
No I/O here, so every column is unit-tested (tests/unit/test_kubectl_etcd_views.py)."""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Mapping
from typing import Any

from etcd_operator.core.backup.manifest import FORMAT, MANIFEST_SUFFIX, WRITER
from etcd_operator.core.cluster.space import ETCD_DEFAULT_QUOTA
from etcd_operator.core.timefmt import parse_datetime

DEFRAGMENT_ANNOTATION = "etcd.operator.dev/defragment"
APPROVE_RECOVERY_ANNOTATION = "etcd.operator.dev/approve-quorum-recovery"


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f}{unit}" if unit == "B" else f"{size:.1f}{unit}"
        size /= 1024
    return f"{n}B"


def human_age(then: str | None, now: datetime.datetime) -> str:
    if not then:
        return "-"
    try:
        moment = parse_datetime(then)
    except ValueError:
        return "-"
    seconds = max(0, int((now - moment).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


# ---- status -------------------------------------------------------------------------


def quota_in_status(status: Mapping[str, Any]) -> int | None:
    """The backend quota the members run, as the operator records it in status.quota
    (core/cluster/decision.py): `quotaBackendBytes`, else the quota derived from the volume;
    recorded as null, etcd's default. None before the operator's first pass."""
    recorded = status.get("quota")
    if not isinstance(recorded, dict):
        return None
    return recorded.get("backendBytes") or ETCD_DEFAULT_QUOTA


def alarms_by_member(status: Mapping[str, Any]) -> dict[str, list[str]]:
    """status.alarms (core/cluster/status.py) by the member each is raised on."""
    found: dict[str, set[str]] = {}
    for entry in status.get("alarms") or []:
        if isinstance(entry, dict) and entry.get("alarm"):
            found.setdefault(str(entry.get("member", "?")), set()).add(entry["alarm"])
    return {member: sorted(names) for member, names in found.items()}


def member_rows(cluster: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per member of status.members: role, health, revision lag against the most
    advanced member, database size against the quota, alarms and version."""
    status = cluster.get("status") or {}
    members = status.get("members") or []
    quota = quota_in_status(status)
    alarms = alarms_by_member(status)
    revisions = [m["revision"] for m in members if isinstance(m.get("revision"), int)]
    newest = max(revisions) if revisions else None
    rows = []
    for m in members:
        revision = m.get("revision")
        rows.append(
            {
                "name": m.get("name", "?"),
                "role": m.get("role") or "-",
                "healthy": m.get("healthy"),
                "revision": revision,
                "revisionLag": newest - revision if newest is not None and isinstance(revision, int) else None,
                "dbSize": m.get("dbSize"),
                "quotaBytes": quota,
                "alarms": alarms.get(m.get("name", "?"), []),
                "version": m.get("version") or "-",
            }
        )
    return rows


def status_view(cluster: Mapping[str, Any]) -> dict[str, Any]:
    status = cluster.get("status") or {}
    return {
        "name": cluster["metadata"]["name"],
        "namespace": cluster["metadata"].get("namespace"),
        "phase": status.get("phase"),
        "size": (cluster.get("spec") or {}).get("size"),
        "leader": status.get("leader"),
        "version": status.get("currentVersion"),
        "quotaBytes": quota_in_status(status),
        "alarms": [
            {k: a.get(k) for k in ("member", "memberID", "alarm")}
            for a in status.get("alarms") or []
            if isinstance(a, dict)
        ],
        "members": member_rows(cluster),
        "conditions": [
            {k: c.get(k) for k in ("type", "status", "reason", "message")} for c in status.get("conditions") or []
        ],
    }


def status_table(view: Mapping[str, Any]) -> str:
    header = (
        f"Cluster {view['namespace']}/{view['name']}: phase {view['phase'] or '-'}, "
        f"size {view['size']}, leader {view['leader'] or '-'}, version {view['version'] or '-'}, "
        f"quota {human_bytes(view['quotaBytes'])}"
    )
    if view["alarms"]:
        header += "\nALARMS RAISED: " + ", ".join(f"{a['alarm']} on {a['member']}" for a in view["alarms"])
    rows = [["MEMBER", "ROLE", "HEALTH", "REVISION", "LAG", "DB SIZE / QUOTA", "ALARMS", "VERSION"]]
    for m in view["members"]:
        used = f"{human_bytes(m['dbSize'])} / {human_bytes(m['quotaBytes'])}"
        if m["dbSize"] is not None and m["quotaBytes"]:
            used += f" ({100 * m['dbSize'] // m['quotaBytes']}%)"
        health = {True: "healthy", False: "UNHEALTHY"}.get(m["healthy"], "unknown")
        rows.append(
            [
                m["name"],
                m["role"],
                health,
                _or_dash(m["revision"]),
                _or_dash(m["revisionLag"]),
                used,
                ",".join(m["alarms"]) or "-",
                m["version"],
            ]
        )
    conditions = [["CONDITION", "STATUS", "REASON", "MESSAGE"]] + [
        [c["type"], c["status"], c["reason"] or "-", c["message"] or ""] for c in view["conditions"]
    ]
    if len(rows) == 1:
        rows.append(["(no members observed yet)", "", "", "", "", "", "", ""])
    return "\n".join([header, "", table(rows), "", table(conditions)])


# ---- backups ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CatalogueEntry:
    key: str
    revision: int | None
    size: int | None
    sha256: str | None
    created_at: str | None
    cluster_id: str | None
    etcd_version: str | None
    verification: str  # what the manifest says, "unknown" when it says nothing
    extra: dict[str, Any]  # manifest fields this version of the plugin does not name

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "revision": self.revision,
            "size": self.size,
            "sha256": self.sha256,
            "createdAt": self.created_at,
            "clusterID": self.cluster_id,
            "etcdVersion": self.etcd_version,
            "verification": self.verification,
            **({"extra": self.extra} if self.extra else {}),
        }


_NAMED = {
    "format",
    "writer",
    "snapshotKey",
    "revision",
    "size",
    "sha256",
    "createdAt",
    "clusterId",
    "etcdVersion",
    "verification",
    "verified",
    "verifiedAt",
}


def parse_manifest(data: bytes) -> CatalogueEntry | None:
    """A manifest written by the operator, read leniently: fields added by later versions
    are kept in `extra`, missing optional ones shown as unknown. None for foreign files."""
    try:
        body = json.loads(data)
    except ValueError:
        return None
    if not isinstance(body, dict) or body.get("format") != FORMAT or body.get("writer") != WRITER:
        return None
    if not body.get("snapshotKey"):
        return None
    return CatalogueEntry(
        key=body["snapshotKey"],
        revision=_int(body.get("revision")),
        size=_int(body.get("size")),
        sha256=body.get("sha256"),
        created_at=body.get("createdAt"),
        cluster_id=body.get("clusterId"),
        etcd_version=body.get("etcdVersion"),
        verification=_verification(body),
        extra={k: v for k, v in body.items() if k not in _NAMED},
    )


def _verification(body: Mapping[str, Any]) -> str:
    v = body.get("verification")
    if isinstance(v, dict):
        word = v.get("result") or v.get("status") or v.get("state")
        when = v.get("time") or v.get("verifiedAt") or v.get("at")
        return f"{word} ({when})" if word and when else str(word or "unknown")
    if isinstance(v, str) and v:
        return v
    if isinstance(body.get("verified"), bool):
        return "verified" if body["verified"] else "failed"
    return "unknown"


def is_manifest_key(key: str) -> bool:
    return key.endswith(MANIFEST_SUFFIX)


def catalogue(entries: list[CatalogueEntry]) -> list[CatalogueEntry]:
    """Newest revision first; order comes from the manifests, never from object names."""
    return sorted(entries, key=lambda e: (e.revision is None, -(e.revision or 0), e.created_at or ""))


def backups_table(entries: list[CatalogueEntry], now: datetime.datetime) -> str:
    rows = [["REVISION", "SIZE", "VERIFICATION", "AGE", "ETCD", "CLUSTER ID", "KEY"]]
    for e in entries:
        rows.append(
            [
                _or_dash(e.revision),
                human_bytes(e.size),
                e.verification,
                human_age(e.created_at, now),
                e.etcd_version or "-",
                e.cluster_id or "-",
                e.key,
            ]
        )
    if len(rows) == 1:
        return "No backups found."
    return table(rows)


def choose_backup(entries: list[CatalogueEntry], revision: int | None, key: str | None) -> CatalogueEntry:
    """The entry a restore uses: by key, by revision, or the newest. Raises LookupError."""
    ordered = catalogue(entries)
    if key is not None:
        matches = [e for e in ordered if e.key == key]
    elif revision is not None:
        matches = [e for e in ordered if e.revision == revision]
    else:
        matches = ordered[:1]
    if not matches:
        wanted = f"key {key}" if key is not None else f"revision {revision}" if revision is not None else "any"
        raise LookupError(f"no backup with {wanted}")
    return matches[0]


def restore_object(
    namespace: str,
    name: str,
    backup: str,
    entry: CatalogueEntry,
    in_place: str | None,
    new_cluster: str | None,
    new_spec: Mapping[str, Any] | None,
) -> dict:
    if (in_place is None) == (new_cluster is None):
        raise ValueError("choose exactly one target: --in-place CLUSTER or --new-cluster NAME")
    target: dict[str, Any] = (
        {"inPlace": {"clusterName": in_place, "confirm": True}}
        if in_place
        else {"newCluster": {"name": new_cluster, **({"spec": dict(new_spec)} if new_spec else {})}}
    )
    return {
        "apiVersion": "etcd.operator.dev/v1alpha1",
        "kind": "EtcdRestore",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"source": {"backupRef": {"name": backup, "key": entry.key}}, "target": target},
    }


def restore_plan(restore: Mapping[str, Any], entry: CatalogueEntry, now: datetime.datetime) -> str:
    target = restore["spec"]["target"]
    lines = [
        f"EtcdRestore {restore['metadata']['namespace']}/{restore['metadata']['name']} will restore",
        f"  snapshot  {entry.key}",
        f"  revision  {_or_dash(entry.revision)}, {human_bytes(entry.size)}, taken {human_age(entry.created_at, now)} "
        f"ago, verification: {entry.verification}",
    ]
    if "inPlace" in target:
        lines += [
            f"  INTO the existing cluster {target['inPlace']['clusterName']}: it is stopped and its data "
            "replaced; every write after this revision is lost. The old PVCs are kept aside until the "
            "restore succeeds."
        ]
    else:
        lines += [f"  into a NEW cluster {target['newCluster']['name']}; existing clusters are not touched."]
    return "\n".join(lines)


# ---- shared -------------------------------------------------------------------------


def table(rows: list[list[Any]]) -> str:
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def _or_dash(value: Any) -> Any:
    return "-" if value is None else value


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
