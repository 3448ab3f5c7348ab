"""`python -m bench sealing`: what compressing and encrypting a snapshot costs, side by
side in one run: plain, zstd, zstd + AES-256-GCM, each encoded and decoded in memory through
core/backup/sealed.py, over a real etcd snapshot holding Kubernetes-like JSON objects (made
with the testbin's etcd 3.6 on a free local port, in a temporary folder). No cluster needed."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import socket
import subprocess
import tempfile
import time
import uuid

from etcd_operator.clients.etcd.client import EtcdMemberClient
from etcd_operator.core.backup import sealed
from localkube import layout as localkube_layout

OBJECTS = 12_000  # ~40 MiB of database
PIECE = 32 << 10  # the snapshot stream's message size
ROUNDS = 3


def _free_port(taken: int = 0) -> int:
    """A free local port in 19600-19699, the range kept for such throwaway servers."""
    for port in range(19600, 19700):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        if port != taken:
            return port
    raise RuntimeError("no free port in 19600-19699")


def _object(i: int) -> dict:
    """A ConfigMap- or Pod-like object as the API server stores it (JSON, as with --storage-media-type=json)."""
    name = f"app-{i % 300}-{uuid.uuid4().hex[:10]}"
    labels = {
        "app.kubernetes.io/name": f"app-{i % 300}",
        "app.kubernetes.io/part-of": "shop",
        "pod-template-hash": uuid.uuid4().hex[:10],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": f"team-{i % 40}",
            "uid": str(uuid.uuid4()),
            "resourceVersion": str(1000 + i),
            "creationTimestamp": "2024-06-01T12:00:00Z",
            "labels": labels,
            "managedFields": [
                {
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2024-06-01T12:00:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {f"f:{k}": {} for k in labels}}},
                }
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": f"registry.example.com/shop/app:{i % 17}.0.{i % 9}",
                    "env": [{"name": f"VAR_{j}", "value": uuid.uuid4().hex} for j in range(6)],
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                }
            ],
            "nodeName": f"node-{i % 50}",
        },
        "status": {
            "phase": "Running",
            "podIP": f"10.{i % 250}.{i % 200}.{i % 100}",
            "conditions": [{"type": t, "status": "True"} for t in ("Ready", "Initialized", "PodScheduled")],
        },
    }


async def _load(url: str) -> None:
    async with EtcdMemberClient(url.removeprefix("http://"), timeout=30) as client:
        for first in range(0, OBJECTS, 200):
            objects = [_object(i) for i in range(first, min(first + 200, OBJECTS))]
            await asyncio.gather(
                *(
                    client.put(
                        f"/registry/pods/{o['metadata']['namespace']}/{o['metadata']['name']}".encode(),
                        json.dumps(o).encode(),
                    )
                    for o in objects
                )
            )


def make_snapshot(folder: pathlib.Path) -> bytes:
    """A snapshot of an etcd 3.6 holding OBJECTS Pod-like JSON values, as `etcdctl snapshot save` writes it."""
    testbin = localkube_layout.testbin_dir() / "etcd-3.6"
    client = _free_port()
    peer = _free_port(taken=client)
    url = f"http://127.0.0.1:{client}"
    etcd = subprocess.Popen(
        [str(testbin / "etcd"), f"--data-dir={folder / 'data'}",
         f"--listen-client-urls={url}", f"--advertise-client-urls={url}",
         f"--listen-peer-urls=http://127.0.0.1:{peer}", f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
         f"--initial-cluster=default=http://127.0.0.1:{peer}", "--quota-backend-bytes=2147483648"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        ctl = [str(testbin / "etcdctl"), f"--endpoints={url}"]
        for _ in range(100):
            if subprocess.run([*ctl, "endpoint", "health"], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        asyncio.run(_load(url))
        out = folder / "snapshot.db"
        subprocess.run([*ctl, "snapshot", "save", str(out)], check=True, capture_output=True)
        return out.read_bytes()
    finally:
        etcd.terminate()
        etcd.wait(10)


def _pieces(data: bytes) -> list[bytes]:
    return [data[i : i + PIECE] for i in range(0, len(data), PIECE)]


def _best_seconds(run) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def measure(snapshot: bytes) -> list[tuple[str, int, float, float]]:
    """(encoding, stored bytes, encode MB/s, decode MB/s), MB/s of plain bytes, best of ROUNDS, one thread."""
    key = os.urandom(sealed.KEY_BYTES)
    encodings = {
        "plain": sealed.PLAIN,
        "zstd": sealed.Encoding(),
        "zstd+aes-256-gcm": sealed.Encoding(algorithm="aes-256-gcm", key_id="bench", key=key),
    }
    pieces = _pieces(snapshot)
    rows = []
    for name, encoding in encodings.items():
        stored = b"".join(sealed.encode(pieces, encoding))
        assert b"".join(sealed.decode(_pieces(stored), {"bench": key})) == snapshot
        stored_pieces = _pieces(stored)
        encode = _best_seconds(lambda: sum(map(len, sealed.encode(pieces, encoding))))  # noqa: B023
        decode = _best_seconds(lambda: sum(map(len, sealed.decode(stored_pieces, {"bench": key}))))  # noqa: B023
        mb = len(snapshot) / 1e6
        rows.append((name, len(stored), mb / encode, mb / decode))
    return rows


def run() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-sealing-") as folder:
        snapshot = make_snapshot(pathlib.Path(folder))
    print(f"\nsealing: a {len(snapshot) / 1e6:.1f} MB etcd 3.6 snapshot of {OBJECTS} Pod-like JSON objects, one thread")
    print(f"  {'encoding':<18} {'stored MB':>10} {'ratio':>7} {'encode MB/s':>12} {'decode MB/s':>12}")
    for name, stored, encode, decode in measure(snapshot):
        if name == "plain":  # stored as etcd wrote it: no pass over the bytes at all
            print(f"  {name:<18} {stored / 1e6:>10.1f} {1:>7.2f} {'as is':>12} {'as is':>12}")
            continue
        print(f"  {name:<18} {stored / 1e6:>10.1f} {len(snapshot) / stored:>7.2f} {encode:>12.0f} {decode:>12.0f}")
    print("  (for scale: the sha256 every upload and restore computes runs at ~1-2 GB/s on one core)")
