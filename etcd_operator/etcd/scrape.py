"""Reads a member's Prometheus /metrics over plain HTTP (its --listen-metrics-urls port)."""

from __future__ import annotations

import aiohttp

MAX_BYTES = 8 * 1024 * 1024  # etcd's own page is a few hundred KiB


class ScrapeError(Exception):
    pass


async def read_metrics(url: str, timeout: float) -> str:
    """The page's text; ScrapeError on any failure, at most `timeout` seconds in all."""
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            async with session.get(url) as response:
                if response.status != 200:
                    raise ScrapeError(f"{url}: HTTP {response.status}")
                body = await response.content.read(MAX_BYTES + 1)
                if len(body) > MAX_BYTES:
                    raise ScrapeError(f"{url}: more than {MAX_BYTES} bytes")
                return body.decode(errors="replace")
    except (aiohttp.ClientError, TimeoutError, UnicodeError) as e:
        raise ScrapeError(f"{url}: {e!r}") from None
