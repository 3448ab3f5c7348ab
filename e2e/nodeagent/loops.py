"""A control loop that runs a cycle when notified, and at least every `interval` seconds."""

from __future__ import annotations

import asyncio
import logging


class WakeableLoop:
    interval: float = 5.0
    purpose: str = "cycle"

    def __init__(self):
        self._wake = asyncio.Event()

    def notify(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        log = logging.getLogger(type(self).__module__)
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), self.interval)
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                await self._cycle()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s failed", self.purpose)

    async def _cycle(self) -> None:
        raise NotImplementedError
