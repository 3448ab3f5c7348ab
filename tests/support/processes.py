"""Stopping the local processes tests and benchmarks start."""

from __future__ import annotations

import subprocess


def stop_gracefully(process: subprocess.Popen | None, grace_seconds: float) -> None:
    """SIGTERM, then SIGKILL if the process has not exited within `grace_seconds`."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(grace_seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
