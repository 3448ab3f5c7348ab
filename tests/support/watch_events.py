"""Records a `kubectl get -w` stream of watch events in the background, so that a test sees
every object created, even one that lives for less than a poll interval."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading

from localkube import layout as localkube_layout


def _kubectl() -> str:
    binary = localkube_layout.testbin_dir() / "kube" / "kubectl"
    return str(binary) if binary.exists() else (shutil.which("kubectl") or "kubectl")


class WatchEvents:
    """`kubectl get <args> -w --output-watch-events -o json`; `events` holds (type, object)
    in the order the API server sent them."""

    def __init__(self, *args: str):
        self.events: list[tuple[str, dict]] = []
        self._process = subprocess.Popen(
            [_kubectl(), "get", *args, "-w", "--output-watch-events", "-o", "json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ},
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        decoder, buffer = json.JSONDecoder(), ""
        for line in self._process.stdout:
            buffer += line
            while buffer.strip():
                try:
                    event, end = decoder.raw_decode(buffer.lstrip())
                except ValueError:
                    break  # the object is not complete yet
                buffer = buffer.lstrip()[end:]
                self.events.append((event.get("type", ""), event.get("object") or {}))

    def stop(self) -> list[tuple[str, dict]]:
        self._process.terminate()
        self._process.wait(10)
        self._reader.join(10)
        return list(self.events)
