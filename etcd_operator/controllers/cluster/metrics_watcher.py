"""Reads the members' /metrics at a low rate, in the background, and keeps a short history
per member for the pure anomaly detection (cluster.anomaly_detection). A reconcile pass never
waits for a scrape: it starts one when due and uses the samples already gathered; each
scrape is bounded by a timeout, so a hung member delays nothing and no other cluster."""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping

from etcd_operator.clients.etcd.scrape import ScrapeError, read_metrics
from etcd_operator.core.cluster import anomaly_detection, naming
from etcd_operator.core.cluster.metrics_sample import MetricsSample, parse, sharing_unchanged
from etcd_operator.core.cluster.observed import Observed, PodView

logger = logging.getLogger(__name__)

SCRAPE_EVERY = 30.0  # MEMBER_METRICS_INTERVAL_SECONDS (runtime/config.py)
SCRAPE_TIMEOUT = 3.0
KEEP = 64  # samples per member at most; those older than the detection window are dropped

Fetch = Callable[[str, float], Awaitable[str]]


def metrics_url(pod: PodView) -> str:
    return f"http://{pod.ip}:{naming.METRICS_PORT}/metrics"


class MemberMetricsWatcher:
    def __init__(
        self,
        fetch: Fetch = read_metrics,
        every: float = SCRAPE_EVERY,
        thresholds: anomaly_detection.Thresholds = anomaly_detection.Thresholds(),
    ):
        self.fetch = fetch
        self.every = every
        self.thresholds = thresholds
        self.histories: dict[str, collections.deque[MetricsSample]] = {}
        self._task: asyncio.Task | None = None
        self._last_start = -math.inf

    def poke(self, pods: Mapping[str, PodView], now: float) -> None:
        """Forgets members whose pod is gone; starts a scrape when one is due."""
        for name in list(self.histories):
            if name not in pods:
                del self.histories[name]
        if (self._task and not self._task.done()) or now - self._last_start < self.every:
            return
        targets = {name: metrics_url(pod) for name, pod in pods.items() if pod.ip and not pod.deleting}
        if targets:
            self._last_start = now
            self._task = asyncio.create_task(self._scrape(targets))

    async def _scrape(self, targets: dict[str, str]) -> None:
        pages = await asyncio.gather(
            *(self.fetch(url, SCRAPE_TIMEOUT) for url in targets.values()), return_exceptions=True
        )
        at = time.time()
        for name, page in zip(targets, pages, strict=True):
            if isinstance(page, ScrapeError):
                logger.debug("metrics of %s not read: %s", name, page)
                continue
            if isinstance(page, BaseException):
                logger.warning("metrics of %s not read: %r", name, page)
                continue
            try:
                # Only the checks' 34 lines are parsed: under 1 ms a page, so on the loop.
                sample = parse(page, at)
            except ValueError as e:
                logger.warning("metrics of %s unreadable: %s", name, e)
                continue
            history = self.histories.setdefault(name, collections.deque(maxlen=KEEP))
            history.append(sharing_unchanged(history[-1] if history else None, sample))
            # Detection compares samples within the window only; older ones never count again.
            while at - history[0].at > self.thresholds.window:
                history.popleft()

    def warnings(
        self, observed: Observed, now: float
    ) -> tuple[dict[str, tuple[anomaly_detection.MemberWarning, ...]], bool]:
        """Warnings per member, and whether any member has a sample in the window at `now`."""
        current = {name: list(h) for name, h in self.histories.items() if name in observed.pods}
        scraped = any(anomaly_detection.in_window(h, now, self.thresholds) for h in current.values())
        found = anomaly_detection.detect(current, anomaly_detection.applied_lags(observed), now, self.thresholds)
        return found, scraped

    async def close(self) -> None:
        if self._task and not self._task.done():
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
