"""Pure views: what each command shows, computed from the objects it read.
No I/O here, so every column is unit-tested (tests/unit/test_kubectl_etcd_views.py)."""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
from collections.abc import Mapping
from typing import Any

from etcd_operator.core.cluster import naming
from etcd_operator.core.cluster.space import ETCD_DEFAULT_QUOTA
from etcd_operator.core.timefmt import parse_datetime

DEFRAGMENT_ANNOTATION = naming.ANNOTATION_DEFRAGMENT
APPROVE_RECOVERY_ANNOTATION = naming.ANNOTATION_APPROVE_QUORUM_RECOVERY
ROTATE_CERTIFICATES_ANNOTATION = naming.ANNOTATION_ROTATE_CERTIFICATES
ROTATE_CA_ANNOTATION = naming.ANNOTATION_ROTATE_CA
MOVE_LEADER_ANNOTATION = naming.ANNOTATION_MOVE_LEADER


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


def most_advanced_follower(cluster: Mapping[str, Any]) -> str | None:
    """The healthy follower of status.members with the highest revision (the lowest name
    among equals): the member a leader move without --to goes to. None when there is none."""
    followers = [
        m
        for m in (cluster.get("status") or {}).get("members") or []
        if m.get("role") == "follower" and m.get("healthy") is True and m.get("name")
    ]
    if not followers:
        return None
    revision = {m["name"]: m["revision"] if isinstance(m.get("revision"), int) else -1 for m in followers}
    return min(revision, key=lambda name: (-revision[name], name))


def leader_move_request(token: str, member: str) -> str:
    """The etcd.operator.dev/move-leader value asking to move leadership to `member`
    (etcd_operator/core/cluster/leader_move.py reads it)."""
    return f"{token}{naming.MOVE_LEADER_TARGET_SEPARATOR}{member}"


def leader_move_outcome(cluster: Mapping[str, Any], request: str) -> str | None:
    """What status.leaderMove says came of `request`; None while it is not handled."""
    record = (cluster.get("status") or {}).get("leaderMove") or {}
    return (record.get("outcome") or "done") if record.get("lastToken") == request else None


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
    """One snapshot as the EtcdBackup's status records it (lastBackup, recentBackups): the
    record core/backup/manifest.py's status_record writes, with its verification if any."""

    key: str
    revision: int | None
    size: int | None
    sha256: str | None
    completion_time: str | None
    cluster_id: str | None
    etcd_version: str | None
    member: str | None
    verification: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "revision": self.revision,
            "size": self.size,
            "sha256": self.sha256,
            "completionTime": self.completion_time,
            "clusterID": self.cluster_id,
            "etcdVersion": self.etcd_version,
            "member": self.member,
            "verification": self.verification,
        }


def _entry(record: Mapping[str, Any], verifying: str | None) -> CatalogueEntry:
    return CatalogueEntry(
        key=record["key"],
        revision=_int(record.get("revision")),
        size=_int(record.get("size")),
        sha256=record.get("sha256"),
        completion_time=record.get("completionTime"),
        cluster_id=record.get("clusterID"),
        etcd_version=record.get("etcdVersion"),
        member=record.get("member"),
        verification="verifying" if verifying == record["key"] else _verification(record.get("verification")),
    )


def _verification(record: Mapping[str, Any] | None) -> str:
    """A verification record of core/backup/status.py: a verdict, or none and why."""
    if not isinstance(record, dict):
        return "not verified"
    if record.get("verified") is True:
        return f"verified {record.get('verifiedAt') or ''}".rstrip()
    if record.get("verified") is False:
        return f"FAILED ({record.get('reason') or '?'})"
    return f"no verdict ({record.get('reason') or '?'})"


def catalogue(backup: Mapping[str, Any]) -> list[CatalogueEntry]:
    """The snapshots the EtcdBackup's status lists (its newest ones; older ones the store
    still holds are not in status), newest revision first: order from the records, never
    from key names."""
    status = backup.get("status") or {}
    records = [r for r in status.get("recentBackups") or [] if isinstance(r, dict) and r.get("key")]
    last = status.get("lastBackup")
    if isinstance(last, dict) and last.get("key") and last["key"] not in {r["key"] for r in records}:
        records.insert(0, last)
    verifying = (status.get("verification") or {}).get("startTime") and status["verification"].get("key")
    entries = [_entry(r, verifying) for r in records]
    return sorted(entries, key=lambda e: (e.revision is None, -(e.revision or 0), e.completion_time or ""))


def continuous_view(backup: Mapping[str, Any]) -> dict[str, Any] | None:
    """status.continuous (core/backup/continuous_status.py): the chain being written, the
    revisions it holds, its lag, when it last held the whole cluster, and its last break."""
    record = (backup.get("status") or {}).get("continuous")
    if not isinstance(record, dict):
        return None
    caught_up = record.get("caughtUp") or None
    return {
        "chain": record.get("chain"),
        "clusterID": record.get("clusterID"),
        "baseKey": record.get("baseKey"),
        "baseRevision": record.get("baseRevision"),
        "lastRevision": record.get("lastRevision"),
        "lastSegmentTime": record.get("lastSegmentTime"),
        "lagRevisions": record.get("lagRevisions"),
        "caughtUp": caught_up if caught_up and caught_up.get("chain") == record.get("chain") else None,
        "needsFullSnapshot": bool(record.get("needsFullSnapshot")),
        "lastBreak": record.get("lastBreak"),
    }


def backups_view(backup: Mapping[str, Any]) -> dict[str, Any]:
    status = backup.get("status") or {}
    return {
        "name": backup["metadata"]["name"],
        "namespace": backup["metadata"].get("namespace"),
        "cluster": ((backup.get("spec") or {}).get("clusterRef") or {}).get("name"),
        "phase": status.get("phase"),
        "lastSuccessfulTime": status.get("lastSuccessfulTime"),
        "nextScheduleTime": status.get("nextScheduleTime"),
        "snapshots": [e.as_dict() for e in catalogue(backup)],
        "continuous": continuous_view(backup),
        "conditions": [
            {k: c.get(k) for k in ("type", "status", "reason", "message")} for c in status.get("conditions") or []
        ],
    }


def backups_table(view: Mapping[str, Any], now: datetime.datetime) -> str:
    header = (
        f"EtcdBackup {view['namespace']}/{view['name']} of cluster {view['cluster'] or '-'}: "
        f"phase {view['phase'] or '-'}, last success {human_age(view['lastSuccessfulTime'], now)} ago, "
        f"next {view['nextScheduleTime'] or '-'}"
    )
    rows = [["REVISION", "SIZE", "VERIFICATION", "AGE", "ETCD", "CLUSTER ID", "KEY"]]
    for e in view["snapshots"]:
        rows.append(
            [
                _or_dash(e["revision"]),
                human_bytes(e["size"]),
                e["verification"],
                human_age(e["completionTime"], now),
                e["etcdVersion"] or "-",
                e["clusterID"] or "-",
                e["key"],
            ]
        )
    parts = [header, "", table(rows) if len(rows) > 1 else "No backups recorded in status yet."]
    if (chain := view["continuous"]) is not None:
        parts += ["", continuous_text(chain, now)]
    conditions = [["CONDITION", "STATUS", "REASON", "MESSAGE"]] + [
        [c["type"], c["status"], c["reason"] or "-", c["message"] or ""] for c in view["conditions"]
    ]
    return "\n".join(parts + ["", table(conditions)])


def continuous_text(chain: Mapping[str, Any], now: datetime.datetime) -> str:
    lines = []
    if chain["chain"]:
        lines.append(
            f"Continuous: chain {chain['chain']} holds revisions {_or_dash(chain['baseRevision'])} "
            f"(base {chain['baseKey']}) to {_or_dash(chain['lastRevision'])}; last segment "
            f"{human_age(chain['lastSegmentTime'], now)} ago, lag {_or_dash(chain['lagRevisions'])} revisions"
        )
        if chain["caughtUp"]:
            up = chain["caughtUp"]
            lines.append(f"  held the whole cluster at revision {up['revision']} ({up['time']})")
    else:
        lines.append("Continuous: no chain is being written")
    if chain["needsFullSnapshot"]:
        lines.append("  a full snapshot is due before a new chain starts")
    if brk := chain["lastBreak"]:
        lines.append(
            f"  last break: chain {brk.get('chain')} at revision {brk.get('lastRevision')} "
            f"({brk.get('reason')}: {brk.get('message')}) {brk.get('time')}"
        )
    return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class Choice:
    """What a restore restores: a whole snapshot by `key` (`entry`: as status lists it, None
    for an older one), or a point (`point`, the value of spec.source.pointInTime)."""

    key: str | None
    entry: CatalogueEntry | None
    point: dict[str, Any] | None
    what: str
    slug: str  # for the restore's default name


def choose(backup: Mapping[str, Any], key: str | None, revision: int | None, time: str | None, latest: bool) -> Choice:
    """The restore's source from what the EtcdBackup's status lists: a snapshot by key, the
    snapshot at exactly `revision`, a point (revision, time, latest) of its continuous
    backup, or by default its newest snapshot not failed. Raises LookupError."""
    entries = catalogue(backup)
    if key is not None:
        entry = next((e for e in entries if e.key == key), None)
        return Choice(key, entry, None, f"snapshot {key}", str(entry.revision) if entry and entry.revision else "key")
    exact = next((e for e in entries if revision is not None and e.revision == revision), None)
    if exact is not None:
        return Choice(exact.key, exact, None, f"snapshot {exact.key}", str(revision))
    if revision is not None or time is not None or latest:
        chain = continuous_view(backup)
        if chain is None:
            raise LookupError(
                f"backup {backup['metadata']['name']} has no snapshot at that point and no continuous backup "
                "to replay to it; `kubectl etcd backups` lists what it has"
            )
        if revision is not None:
            return Choice(None, None, {"revision": revision}, f"revision {revision}", str(revision))
        if time is not None:
            try:
                moment = parse_datetime(time)
            except ValueError:
                raise LookupError(f"--time {time!r} is not an RFC 3339 time") from None
            return Choice(None, None, {"time": time}, f"time {time}", f"{moment:%Y%m%d%H%M%S}")
        return Choice(None, None, {"latest": True}, "the newest revision the backup holds", "latest")
    good = [e for e in entries if not e.verification.startswith("FAILED")]
    if not good:
        raise LookupError(f"backup {backup['metadata']['name']} lists no snapshot in its status yet")
    return Choice(good[0].key, good[0], None, f"snapshot {good[0].key}", str(good[0].revision or "latest"))


def restore_object(
    namespace: str,
    name: str,
    backup: str,
    choice: Choice,
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
    source: dict[str, Any] = {"backupRef": {"name": backup}}
    if choice.point is not None:
        source["pointInTime"] = dict(choice.point)  # the CRD: a point needs backupRef without key
    elif choice.key is not None:
        source["backupRef"]["key"] = choice.key
    return {
        "apiVersion": "etcd.operator.dev/v1alpha1",
        "kind": "EtcdRestore",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"source": source, "target": target},
    }


def restore_plan(restore: Mapping[str, Any], choice: Choice, now: datetime.datetime) -> str:
    target = restore["spec"]["target"]
    lines = [f"EtcdRestore {restore['metadata']['namespace']}/{restore['metadata']['name']} will restore"]
    if (entry := choice.entry) is not None:
        lines += [
            f"  snapshot  {entry.key}",
            f"  revision  {_or_dash(entry.revision)}, {human_bytes(entry.size)}, taken "
            f"{human_age(entry.completion_time, now)} ago, verification: {entry.verification}",
        ]
    elif choice.key is not None:
        lines += [
            f"  snapshot  {choice.key}",
            "  (not among the newest snapshots the backup's status lists; the operator checks it before "
            "touching anything)",
        ]
    else:
        lines += [
            f"  the backup as it was at {choice.what}: its newest full snapshot before that point, "
            "then its continuous backup's segments replayed up to it"
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


# ---- hibernation, certificates, logs ------------------------------------------------


def hibernation_patch(enabled: bool) -> dict[str, Any]:
    """spec.hibernation.enabled, the field hibernation is (docs/operations/hibernation.md)."""
    return {"spec": {"hibernation": {"enabled": enabled}}}


def rotation_annotation(ca: bool) -> str:
    return ROTATE_CA_ANNOTATION if ca else ROTATE_CERTIFICATES_ANNOTATION


_RECORD_START = re.compile(r"^\d{4}-\d\d-\d\d[ T]")


def lines_about(log: str, namespace: str, name: str) -> list[str]:
    """The operator's log lines about one object (runtime/logs.py): plain lines carry
    `[namespace/name]` after the level, with the lines of a traceback after them; JSON
    lines carry it under `object`."""
    tag = f" [{namespace}/{name}] "
    kept: list[str] = []
    keeping = False
    for line in log.splitlines():
        if line.startswith("{"):
            try:
                ref = (json.loads(line).get("object") or {}) if line.rstrip().endswith("}") else {}
            except ValueError:
                ref = {}
            keeping = isinstance(ref, dict) and (ref.get("namespace"), ref.get("name")) == (namespace, name)
        elif _RECORD_START.match(line):
            keeping = tag in line
        if keeping:
            kept.append(line)
    return kept


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
