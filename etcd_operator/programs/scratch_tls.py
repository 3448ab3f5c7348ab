"""`python -m etcd_operator.programs.scratch_tls`: the init container that makes a scratch
member's throwaway TLS (core/scratch_tls.py) in SCRATCH_TLS_DIR, a folder of the pod's own
emptyDir, before the member starts. Files are readable by the pod's user only; the CA's key
is never written. Read back by the pod's client with read_client_tls."""

from __future__ import annotations

import os
import pathlib
import sys
import time
from collections.abc import Mapping

from etcd_operator.clients.etcd.client import ClientTLS
from etcd_operator.core import scratch_tls


def write(folder: pathlib.Path, now: float) -> None:
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    for name, pem in scratch_tls.throwaway_pki(now).items():
        path = folder / name
        path.unlink(missing_ok=True)  # a restarted init container writes a fresh set
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
            f.write(pem)


def read_client_tls(folder: str) -> ClientTLS:
    """The client's side of the set write() made. Blocking: run it in a thread."""
    files = pathlib.Path(folder)
    return ClientTLS(
        ca=(files / scratch_tls.CA_FILE).read_bytes(),
        cert=(files / scratch_tls.CLIENT_CERT_FILE).read_bytes(),
        key=(files / scratch_tls.CLIENT_KEY_FILE).read_bytes(),
        server_name=scratch_tls.SERVER_NAME,
    )


def main(env: Mapping[str, str]) -> int:
    write(pathlib.Path(env["SCRATCH_TLS_DIR"]), time.time())
    return 0


if __name__ == "__main__":
    sys.exit(main(dict(os.environ)))
