"""A continuous EtcdBackup against real etcd members on the real nodes and the substrate's
MinIO, with the operator as a process on the host: its segments chain from the base snapshot
with no gap and decode to exactly the writes made; and a chain whose next revision was
compacted while the operator was stopped is detected broken, reported, and followed by a
full snapshot and a new chain."""

from __future__ import annotations

import asyncio
import time

import pytest

from etcd_operator.clients.etcd.client import EtcdMemberClient
from etcd_operator.core.backup.segment_sealing import open_body
from etcd_operator.core.backup.segments import SegmentManifest
from localkube import controlplane
from tests.support.backups import apply_backup, fill, get_backup
from tests.support.clusters import FAST_RECOVERY, apply_cluster, events, member_endpoints, wait_healthy
from tests.support.s3 import create_credentials_secret, list_keys, s3_client, s3_storage_spec
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.needs_nodes, pytest.mark.needs_operator_process, pytest.mark.needs_store, pytest.mark.lane2]


@pytest.fixture
def cluster(real_nodes, namespace, operator):
    apply_cluster(namespace, "db", {"size": 3, "storage": {"size": "1Gi"}, "recovery": FAST_RECOVERY})
    wait_healthy(namespace, "db", 3)
    create_credentials_secret(real_nodes, namespace)
    return "db"


def continuous_backup(real_nodes, namespace: str, cluster: str, name: str) -> str:
    prefix = f"tests/{namespace}"
    apply_backup(
        namespace,
        name,
        {
            "clusterRef": {"name": cluster},
            "continuous": {"enabled": True, "segmentSeconds": 1},
            "storage": s3_storage_spec(real_nodes, prefix),
        },
    )
    return prefix


def streaming(namespace: str, name: str, timeout: float = 180) -> dict:
    def ready():
        backup = get_backup(namespace, name)
        found = [c for c in backup.get("status", {}).get("conditions", []) if c["type"] == "ContinuousBackup"]
        chain = (backup["status"].get("continuous") or {}).get("chain")
        return found and found[0]["status"] == "True" and chain and backup

    return wait_for(ready, timeout, what=f"{name} streaming")


def segments_of(real_nodes, prefix: str, chain: str) -> list[tuple[SegmentManifest, bytes]]:
    s3 = s3_client(real_nodes)
    bucket = controlplane.S3_BUCKET
    found = []
    for key in list_keys(s3, bucket, prefix):
        if key.endswith(".segment.json"):
            manifest = SegmentManifest.from_json(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
            if manifest.chain == chain:
                body = s3.get_object(Bucket=bucket, Key=manifest.segment_key)["Body"].read()
                found.append((manifest, body))
    return sorted(found, key=lambda pair: pair[0].sequence)


def write(endpoint: str, count: int, prefix: str) -> dict[int, tuple[bytes, bytes | None]]:
    """Puts `count` keys; the revision each put made, with its key and value."""

    async def run():
        made = {}
        async with EtcdMemberClient(endpoint, timeout=10) as client:
            for i in range(count):
                key, value = f"{prefix}{i:05}".encode(), f"value-{i}".encode() * 20
                made[await client.put(key, value)] = (key, value)
        return made

    return asyncio.run(run())


def test_segments_chain_from_the_base_snapshot_and_hold_exactly_the_writes(real_nodes, namespace, cluster):
    endpoints = member_endpoints(namespace, cluster)
    fill(endpoints, 50, 256)
    prefix = continuous_backup(real_nodes, namespace, cluster, "cont")
    backup = streaming(namespace, "cont")
    chain, base = backup["status"]["continuous"]["chain"], backup["status"]["continuous"]["baseRevision"]
    assert backup["status"]["lastBackup"]["revision"] == base

    made = write(endpoints[0], 600, "/continuous/")
    last_write, written_at = max(made), time.monotonic()
    backup = wait_for(
        lambda: (b := get_backup(namespace, "cont"))["status"]["continuous"].get("lastRevision", 0) >= last_write and b,
        60,
        interval=0.2,
        what="the last write uploaded",
    )
    assert time.monotonic() - written_at < 10, "the last write took more than 10 s to reach the store"

    segments = segments_of(real_nodes, prefix, chain)
    manifests = [m for m, _ in segments]
    assert [m.sequence for m in manifests] == list(range(1, len(manifests) + 1))
    assert manifests[0].first_revision == base + 1 and manifests[0].base_revision == base
    for before, after in zip(manifests, manifests[1:], strict=False):
        assert after.first_revision == before.last_revision + 1, (before, after)
    seen = {}
    for manifest, body in segments:
        assert manifest.checks(body) is None
        assert manifest.compression == "zstd" and not manifest.encrypted  # the backup's default
        decoded = open_body(body, {})
        assert [r.revision for r in decoded.revisions] == list(
            range(manifest.first_revision, manifest.last_revision + 1)
        )
        assert decoded.events == manifest.events
        for record in decoded.revisions:
            seen[record.revision] = record
    for revision, (key, value) in made.items():
        record = seen[revision]
        assert [(c.key, c.value) for c in record.changes] == [(key, value)], record
    assert backup["status"]["continuous"]["eventsSinceFullSnapshot"] >= len(made)


def test_a_broken_chain_is_detected_and_followed_by_a_full_snapshot(real_nodes, namespace, cluster, operator):
    endpoints = member_endpoints(namespace, cluster)
    prefix = continuous_backup(real_nodes, namespace, cluster, "cont")
    backup = streaming(namespace, "cont")
    old_chain = backup["status"]["continuous"]["chain"]
    write(endpoints[0], 20, "/before/")
    wait_for(
        lambda: get_backup(namespace, "cont")["status"]["continuous"].get("segmentsSinceFullSnapshot", 0) > 0,
        60,
        what="a first segment",
    )

    operator.stop()
    made = write(endpoints[0], 30, "/while-stopped/")

    async def compact() -> None:
        async with EtcdMemberClient(endpoints[0], timeout=10) as client:
            await client.compact(max(made))

    asyncio.run(compact())
    operator.start()

    broken = wait_for(
        lambda: [e for e in events(namespace, "cont") if e["reason"] == "ContinuousChainBroken"],
        120,
        what="the ContinuousChainBroken event",
    )
    assert broken[0]["type"] == "Warning" and old_chain in broken[0]["message"], broken
    backup = streaming(namespace, "cont", timeout=180)
    status = backup["status"]
    assert status["continuous"]["lastBreak"]["reason"] == "RevisionCompacted", status["continuous"]
    assert status["continuous"]["lastBreak"]["chain"] == old_chain
    new_chain = status["continuous"]["chain"]
    assert new_chain != old_chain
    assert status["lastBackup"]["revision"] >= max(made)  # a full snapshot taken after the break
    assert status["continuous"]["baseRevision"] == status["lastBackup"]["revision"]

    after = write(endpoints[0], 10, "/after/")
    wait_for(
        lambda: get_backup(namespace, "cont")["status"]["continuous"].get("lastRevision", 0) >= max(after),
        60,
        what="the new chain's writes uploaded",
    )
    segments = segments_of(real_nodes, prefix, new_chain)
    assert segments and segments[0][0].first_revision == status["continuous"]["baseRevision"] + 1
    held = {r.revision for _, body in segments for r in open_body(body, {}).revisions}
    assert set(after) <= held
