"""Reads a member's Prometheus /metrics over plain HTTP (its --listen-metrics-urls port).
The one fetcher of the page; cluster/metrics_sample parses it."""

from __future__ import annotations

import aiohttp

MAX_BYTES = 8 * 1024 * 1024  # etcd's own page is a few hundred KiB


class ScrapeError(Exception):
    pass


async def read_metrics(url: str, timeout: float, series: bytes | None = None) -> str:
    """The page's text; ScrapeError on any failure, at most `timeout` seconds in all. With
    `series`, only the lines that start with it, read up to the last of them (a series'
    lines are adjacent)."""
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            # Uncompressed: gzip costs the member about a quarter more CPU per page, and this
            # process as much again to inflate it, to save bytes on the pod network.
            async with session.get(url, headers={"Accept-Encoding": "identity"}) as response:
                if response.status != 200:
                    raise ScrapeError(f"{url}: HTTP {response.status}")
                if series is not None:
                    return await _read_series(response, series)
                # read(n) returns what has arrived so far, not n bytes: read on to the end.
                chunks, size = [], 0
                async for chunk in response.content.iter_any():
                    size += len(chunk)
                    if size > MAX_BYTES:
                        raise ScrapeError(f"{url}: more than {MAX_BYTES} bytes")
                    chunks.append(chunk)
                return b"".join(chunks).decode(errors="replace")
    except (aiohttp.ClientError, TimeoutError, UnicodeError, ValueError) as e:  # ValueError: a line too long
        raise ScrapeError(f"{url}: {e!r}") from None


async def _read_series(response: aiohttp.ClientResponse, series: bytes) -> str:
    lines: list[bytes] = []
    async for line in response.content:
        if line.startswith(series):
            lines.append(line)
        elif lines:
            break
    return b"".join(lines).decode()
