"""One platform's SBOM (SPDX 2.3 JSON) by syft, from the image's unpacked root: the Debian
packages of /var/lib/dpkg/status.d, the Python packages' dist-info, the Go modules of
etcd-replay-apply. syft stamps each document with the wall clock and a random namespace; both
are replaced, by SOURCE_DATE_EPOCH and a namespace named after the release and platform, so
the same release gives the same SBOM.

    sbom.py SYFT ROOTFS VERSION ARCH OUT
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

from oci_layout import source_date  # this script's folder is on sys.path

NAMESPACE = "https://github.com/etcd-operator/etcd-operator/releases/download"


def main(syft: str, rootfs: pathlib.Path, version: str, arch: str, out: pathlib.Path) -> None:
    env = {**os.environ, "SYFT_CHECK_FOR_APP_UPDATE": "false"}
    command = [syft, "scan", f"dir:{rootfs}", "--source-name", "etcd-operator", "--source-version", version]
    scanned = subprocess.run([*command, "-q", "-o", "spdx-json"], capture_output=True, text=True, env=env)
    if scanned.returncode != 0:
        raise SystemExit(f"sbom: syft failed: {scanned.stderr[-2000:]}")
    document = json.loads(scanned.stdout)
    document["creationInfo"]["created"] = source_date()
    document["documentNamespace"] = f"{NAMESPACE}/v{version}/etcd-operator-{version}-linux-{arch}.spdx.json"
    document["name"] = f"etcd-operator {version} linux/{arch}"
    out.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3], sys.argv[4], pathlib.Path(sys.argv[5]))
