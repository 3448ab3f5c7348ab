"""The continuous backups' writers this process runs, one per EtcdBackup. Only the backup
controller starts and stops them (the planner's stream steps), and the backup's daemon stops
its writer when it ends (the object deleted, the operator stopping). A replica that loses its
leadership exits (etcd_operator/__main__.py), and its writers' uploads are refused before
then (leadership_fence)."""

from __future__ import annotations

import asyncio

from etcd_operator.controllers.backup.continuous_writer import SegmentWriter
from etcd_operator.core.backup.continuous import StreamView

Key = tuple[str, str]  # (namespace, name)


class ContinuousStreams:
    def __init__(self) -> None:
        self._writers: dict[Key, SegmentWriter] = {}

    def get(self, key: Key) -> SegmentWriter | None:
        return self._writers.get(key)

    def view(self, key: Key) -> StreamView | None:
        """The writer as the planner sees it; None when none runs. A writer that ended
        without a break (an unexpected error) counts as none: the planner starts another."""
        writer = self._writers.get(key)
        if writer is None or (writer.ended and writer.broken is None):
            return None
        return writer.view()

    async def start(self, key: Key, writer: SegmentWriter) -> SegmentWriter | None:
        """Starts `writer` for `key`, after stopping the one before, which it returns."""
        before = self._writers.pop(key, None)
        if before is not None:
            await before.stop()
        self._writers[key] = writer
        writer.start()
        return before

    async def stop(self, key: Key) -> None:
        writer = self._writers.pop(key, None)
        if writer is not None:
            await writer.stop()

    async def stop_all(self) -> None:
        await asyncio.gather(*(self.stop(key) for key in list(self._writers)))
