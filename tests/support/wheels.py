"""A built wheel's metadata, read as pip reads it."""

from __future__ import annotations

import pathlib
import zipfile


def requires_dist(wheel: pathlib.Path) -> list[str]:
    """The wheel's Requires-Dist entries as written (name and version bounds)."""
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        lines = archive.read(metadata).decode().splitlines()
    return [line.split(":", 1)[1].strip() for line in lines if line.startswith("Requires-Dist:")]
