"""Point-in-time restore against real MinIO and real etcd members in pods on the real nodes,
with the operator as a process on the host: a cluster with a continuous EtcdBackup takes
writes whose revisions and times the test records; a restore to a chosen revision and one
to a chosen time and one to the latest point, each into a new cluster, hold exactly the
source's keys and values at that revision, compared key by key with the source read at it
(`get --rev`). The writes include short lease sessions as lock and election clients make them
(`etcdctl lock`; a lease granted, a key put under it and revoked within a second; a lease left
to expire), so the chain has to carry leases that were gone before the writer could ask for
them. A restore to a time after the last write (after the chain's last cut, the cluster idle)
is as exact, and says its auth state is the time's from the writer's auth reading after it.
A restore to a time an hour ahead, which the backup has not seen past, fails
(PointNotReachable). With an encrypted continuous backup, the segments and the replayed snapshot are stored sealed
(no written value readable in the store), and the restore with the backup's key is exact."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time

import pytest

from etcd_operator.clients.etcd.replay import ReplayMember
from etcd_operator.core.backup import sealed
from etcd_operator.core.backup.manifest import manifest_key
from etcd_operator.core.backup.segment_sealing import open_body
from etcd_operator.core.backup.segments import (
    SEGMENT_MANIFEST_SUFFIX,
    KeyChange,
    SegmentManifest,
    segments_prefix,
)
from etcd_operator.core.timefmt import format_precise_time, parse_time
from localkube import controlplane
from tests.support.backups import apply_backup, apply_restore, fill, get_backup, wait_phase
from tests.support.cluster_checks import etcdctl
from tests.support.clusters import (
    FAST_RECOVERY,
    PLAINTEXT,
    apply_cluster,
    condition,
    member_endpoints,
    wait_healthy,
)
from tests.support.kubectl import kubectl
from tests.support.s3 import create_credentials_secret, s3_client, s3_storage_spec
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.needs_nodes, pytest.mark.needs_operator_process, pytest.mark.needs_store, pytest.mark.lane6]

# The continuous backup's stanza on EtcdBackup (the segment writer's; the one line to change
# if its name changes). Everything else here reads what it writes through segment manifests.
CONTINUOUS = {"continuous": {"enabled": True}}
WATCH_SETTLE = 1.0  # seconds around the write a time target names: far above a watch's delay


def keyspace(endpoints: list[str], revision: int | None = None) -> dict[bytes, bytes]:
    args = ["get", "", "--prefix", "-w", "json"] + ([f"--rev={revision}"] if revision else [])
    kvs = json.loads(etcdctl(endpoints, *args)).get("kvs") or []
    return {base64.b64decode(kv["key"]): base64.b64decode(kv.get("value", "")) for kv in kvs}


def segment_manifests(s3, prefix: str) -> list[SegmentManifest]:
    found = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=controlplane.S3_BUCKET, Prefix=prefix):
        for obj in page.get("Contents", []):
            if obj["Key"].endswith(SEGMENT_MANIFEST_SUFFIX):
                body = s3.get_object(Bucket=controlplane.S3_BUCKET, Key=obj["Key"])["Body"].read()
                found.append(SegmentManifest.from_json(body))
    return found


def last_seen_by(s3, manifests: list[SegmentManifest], moment: float) -> int:
    """The revision the backup's watch had seen last at `moment`, read from the segments."""
    seen = []
    for manifest in manifests:
        stored = s3.get_object(Bucket=controlplane.S3_BUCKET, Key=manifest.segment_key)["Body"].read()
        body = open_body(stored, {})  # compressed only: the backup encrypts nothing
        seen += [r.revision for r in body.revisions if r.seen_at <= moment]
    return max(seen)


def lease_sessions(endpoint: str, name: str) -> None:
    """What lock and election clients do, each through etcdctl as they would: a lock taken and
    released (a session lease granted, a key put under it, deleted, the lease revoked), a key
    put under a fresh lease that is revoked at once (which deletes the key), and a key under a
    lease left to expire (the leader deletes it). Every lease here is gone long before a
    writer could ask for its time to live."""
    etcdctl([endpoint], "lock", "--ttl=3", f"/locks/{name}", "true")
    for expire in (False, True):
        key = f"/sessions/{name}/{'expired' if expire else 'revoked'}"
        granted = etcdctl([endpoint], "lease", "grant", "2" if expire else "3")
        lease = granted.split()[1]  # "lease 694d... granted with TTL(3s)"
        etcdctl([endpoint], "put", f"--lease={lease}", key, "held")
        if expire:
            wait_for(lambda key=key: not etcdctl([endpoint], "get", key).strip(), 30, what=f"{key} gone with its lease")
        else:
            etcdctl([endpoint], "lease", "revoke", lease)


def write_history(endpoint: str) -> list[tuple[int, float]]:
    """Puts, overwrites, deletes and two-key transactions, one revision each: (revision, time
    the write returned), with lease sessions between them (not in the list)."""

    async def write():
        written = []
        async with ReplayMember(endpoint, timeout=10) as client:
            for i in range(60):
                if i in (10, 33, 55):
                    await asyncio.to_thread(lease_sessions, endpoint, f"s{i}")
                if i == 40:
                    await asyncio.sleep(WATCH_SETTLE)
                if i % 9 == 4:  # a key of the first fill deleted, another written, in one revision
                    changes = [KeyChange(f"/a/{i:06}".encode(), None), KeyChange(f"/b/{i:03}".encode(), b"new")]
                else:
                    changes = [KeyChange(f"/a/{i % 17:06}".encode(), f"value {i}".encode())]
                revision = await client.txn(changes)
                written.append((revision, time.time()))
                if i == 40:
                    await asyncio.sleep(2 * WATCH_SETTLE)
        return written

    return asyncio.run(write())


def test_restores_to_a_chosen_revision_and_to_a_chosen_time_hold_exactly_the_source_then(
    real_nodes, namespace, operator
):
    apply_cluster(namespace, "src", {"size": 3, "storage": {"size": "1Gi"}, "recovery": FAST_RECOVERY})
    wait_healthy(namespace, "src", 3)
    create_credentials_secret(real_nodes, namespace)
    source = member_endpoints(namespace, "src")
    fill(source, 100, 128, prefix="/a/")
    prefix = f"tests/{namespace}"
    apply_backup(
        namespace,
        "pitr",
        {"clusterRef": {"name": "src"}, "storage": s3_storage_spec(real_nodes, prefix), **CONTINUOUS},
    )
    wait_for(lambda: get_backup(namespace, "pitr")["status"].get("lastSuccessfulTime"), 180, what="a full snapshot")
    written = write_history(source[0])
    last = written[-1][0]
    s3 = s3_client(real_nodes)
    folder = segments_prefix(prefix, namespace, "pitr")
    manifests = wait_for(
        lambda: (m := segment_manifests(s3, folder)) and max(s.last_revision for s in m) >= last and m,
        180,
        what=f"segments up to revision {last}",
    )
    at_revision = written[25][0]
    # write 40 seen by then, write 41 not yet sent
    moment_text = format_precise_time(written[40][1] + WATCH_SETTLE)
    moment = parse_time(moment_text)
    at_time = last_seen_by(s3, manifests, moment)
    assert at_time == written[40][0], "the backup's watch saw write 40 within a second"

    new_cluster = {**PLAINTEXT, "size": 3, "storage": {"size": "1Gi"}}
    apply_restore(
        namespace,
        "to-rev",
        {
            "source": {"backupRef": {"name": "pitr"}, "pointInTime": {"revision": at_revision}},
            "target": {"newCluster": {"name": "at-rev", "spec": new_cluster}},
        },
    )
    apply_restore(
        namespace,
        "to-time",
        {
            "source": {"backupRef": {"name": "pitr"}, "pointInTime": {"time": moment_text}},
            "target": {"newCluster": {"name": "at-time", "spec": {**new_cluster, "size": 1}}},
        },
    )
    # A time the backup has not seen past (an hour ahead) is refused before anything is created.
    apply_restore(
        namespace,
        "to-future",
        {
            "source": {"backupRef": {"name": "pitr"}, "pointInTime": {"time": format_precise_time(time.time() + 3600)}},
            "target": {"newCluster": {"name": "at-future", "spec": {**new_cluster, "size": 1}}},
        },
    )
    apply_restore(
        namespace,
        "to-latest",
        {
            "source": {"backupRef": {"name": "pitr"}, "pointInTime": {"latest": True}},
            "target": {"newCluster": {"name": "at-latest", "spec": {**new_cluster, "size": 1}}},
        },
    )
    # A time after the last write, so after the chain's last cut: no segment read auth after it;
    # the writer, caught up with a cluster that writes nothing, reads it every 10 s, and the
    # restore takes that reading (status.continuous.authRead) once one was sent after the time.
    idle_text = format_precise_time(written[-1][1] + WATCH_SETTLE)

    def read_after_idle_time() -> bool:
        continuous = get_backup(namespace, "pitr")["status"].get("continuous") or {}
        times = [parse_time((continuous.get(field) or {}).get("time")) for field in ("caughtUp", "authRead")]
        return all(t is not None and t >= parse_time(idle_text) for t in times)

    wait_for(read_after_idle_time, 120, what="the writer caught up and read auth after the idle time")
    apply_restore(
        namespace,
        "to-idle",
        {
            "source": {"backupRef": {"name": "pitr"}, "pointInTime": {"time": idle_text}},
            "target": {"newCluster": {"name": "at-idle", "spec": {**new_cluster, "size": 1}}},
        },
    )
    refused = wait_phase(namespace, "to-future", "Failed", timeout=180)
    failed = condition(refused, "Failed")
    assert failed and failed["reason"] == "PointNotReachable", refused["status"]
    assert "no revision backed up was seen after that time" in failed["message"], failed
    assert kubectl("get", "etcdcluster", "at-future", "-n", namespace, check=False).returncode != 0
    for restore, cluster, revision, size in (
        ("to-rev", "at-rev", at_revision, 3),
        ("to-time", "at-time", at_time, 1),
        ("to-latest", "at-latest", last, 1),
        ("to-idle", "at-idle", last, 1),
    ):
        completed = wait_phase(namespace, restore, "Completed", timeout=600)
        status = completed["status"]
        point = status["pointInTime"]
        if restore == "to-idle":  # no auth change: the writer's reading after the time says so
            auth = condition(completed, "AuthStateAtTarget")
            assert auth and (auth["status"], auth["reason"]) == ("True", "AuthUnchanged"), status
            assert point["targetAuthReadTime"] >= idle_text and "targetAuthSegment" not in point, point
        assert status["restoredRevision"] == point["reachedRevision"] == revision, point
        assert status["sourceKey"] == point.get("replayedKey", point["baseKey"])
        wait_healthy(namespace, cluster, size)
        restored = keyspace(member_endpoints(namespace, cluster))
        expected = keyspace(source, revision)
        assert len(restored) == len(expected) >= 100
        assert restored == expected  # every key and value, exactly as the source held them at that revision
    # The replay pods are gone once their results were read.
    for pod in ("to-rev-pitr", "to-time-pitr", "to-latest-pitr", "to-idle-pitr"):
        assert kubectl("get", "pod", pod, "-n", namespace, check=False).returncode != 0, f"{pod} was left"


def stored_object(s3, key: str) -> bytes:
    return s3.get_object(Bucket=controlplane.S3_BUCKET, Key=key)["Body"].read()


def assert_sealed_under(stored: bytes, key_id: str) -> None:
    header = sealed.Header.parse(stored)
    assert header is not None and (header.compression, header.algorithm, header.key_id) == (
        "zstd",
        "aes-256-gcm",
        key_id,
    )
    assert b"value " not in stored and b"/a/0000" not in stored  # no written key or value readable


def test_an_encrypted_continuous_backup_stores_segments_and_the_replayed_snapshot_sealed_and_restores_exactly(
    real_nodes, namespace, operator
):
    apply_cluster(namespace, "src", {"size": 1, "storage": {"size": "1Gi"}})
    wait_healthy(namespace, "src", 1)
    create_credentials_secret(real_nodes, namespace)
    key = base64.b64encode(os.urandom(32)).decode()
    kubectl("create", "secret", "generic", "backup-keys", "-n", namespace, f"--from-literal=k1={key}")
    source = member_endpoints(namespace, "src")
    fill(source, 100, 128, prefix="/a/")
    prefix = f"tests/{namespace}"
    apply_backup(
        namespace,
        "pitr",
        {
            "clusterRef": {"name": "src"},
            "storage": s3_storage_spec(real_nodes, prefix),
            "encryption": {"secretRef": {"name": "backup-keys"}, "keyID": "k1"},
            **CONTINUOUS,
        },
    )
    wait_for(lambda: get_backup(namespace, "pitr")["status"].get("lastSuccessfulTime"), 180, what="a full snapshot")
    written = write_history(source[0])
    last = written[-1][0]
    s3 = s3_client(real_nodes)
    folder = segments_prefix(prefix, namespace, "pitr")
    manifests = wait_for(
        lambda: (m := segment_manifests(s3, folder)) and max(s.last_revision for s in m) >= last and m,
        180,
        what=f"segments up to revision {last}",
    )
    for manifest in manifests:
        assert (manifest.compression, manifest.encryption, manifest.key_id) == ("zstd", "aes-256-gcm", "k1")
        assert_sealed_under(stored_object(s3, manifest.segment_key), "k1")

    at_revision = written[30][0]
    apply_restore(
        namespace,
        "to-rev",
        {
            # no encryptionKeysSecretRef: the EtcdBackup's Secret decrypts, in the replay pod too
            "source": {"backupRef": {"name": "pitr"}, "pointInTime": {"revision": at_revision}},
            "target": {"newCluster": {"name": "at-rev", "spec": {**PLAINTEXT, "size": 1, "storage": {"size": "1Gi"}}}},
        },
    )
    status = wait_phase(namespace, "to-rev", "Completed", timeout=600)["status"]
    point = status["pointInTime"]
    assert status["restoredRevision"] == point["reachedRevision"] == at_revision, point
    assert point.get("segments", 0) > 0 and status["sourceKey"] == point["replayedKey"], point
    replayed = stored_object(s3, point["replayedKey"])
    assert_sealed_under(replayed, "k1")
    replayed_manifest = json.loads(stored_object(s3, manifest_key(point["replayedKey"])))
    assert (replayed_manifest["compression"], replayed_manifest["encryption"], replayed_manifest["keyId"]) == (
        "zstd",
        "aes-256-gcm",
        "k1",
    )
    assert replayed_manifest["size"] == len(replayed) and replayed_manifest["sha256"] == status["sha256"]
    wait_healthy(namespace, "at-rev", 1)
    restored = keyspace(member_endpoints(namespace, "at-rev"))
    expected = keyspace(source, at_revision)
    assert len(restored) == len(expected) >= 100
    assert restored == expected  # every key and value, exactly as the source held them at that revision
