"""The Maintenance.Snapshot stream read with gRPC's synchronous API, for a worker thread:
it is a third faster than the asyncio API, and keeps the per-message work off the
operator's event loop."""

from __future__ import annotations

from typing import Iterator

import grpc
from aetcd import rpc

from etcd_operator.etcd.client import SNAPSHOT_MESSAGE_BYTES, EtcdError

SNAPSHOT_DEADLINE = 6 * 3600.0  # a very large database; stalls are caught by an idle timer


class SnapshotStream:
    """Iterates the snapshot's bytes; `cancel()` may be called from any thread."""

    def __init__(self, endpoint: str):
        self.endpoint = endpoint
        self._channel = grpc.insecure_channel(
            endpoint, options=[("grpc.max_receive_message_length", SNAPSHOT_MESSAGE_BYTES)])
        self._call = rpc.MaintenanceStub(self._channel).Snapshot(rpc.SnapshotRequest(), timeout=SNAPSHOT_DEADLINE)

    def __iter__(self) -> Iterator[bytes]:
        try:
            for response in self._call:
                if response.blob:
                    yield response.blob
        except grpc.RpcError as e:
            raise EtcdError(self.endpoint, "Snapshot", e.code(), e.details() or str(e.code())) from None
        finally:
            self._channel.close()

    def cancel(self) -> None:
        self._call.cancel()
