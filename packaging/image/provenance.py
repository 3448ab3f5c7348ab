"""The release image's provenance: an in-toto statement with a SLSA v1 provenance predicate,
naming the image index and each platform's manifest as subjects, and as resolved dependencies
the source commit, every Debian package (version and .deb sha256) and the Python lock file.

    provenance.py LAYOUT COMMIT LOCK DEBS_DIR > provenance.json

It holds no time but SOURCE_DATE_EPOCH's, so the same release gives the same statement.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import platform
import subprocess
import sys

from oci_layout import source_date  # this script's folder is on sys.path

REPOSITORY = "https://github.com/etcd-operator/etcd-operator"
IMAGE = "ghcr.io/etcd-operator/etcd-operator"
BUILD_TYPE = f"{REPOSITORY}/blob/main/docs/operations/releasing.md#the-image"


def blob(layout: pathlib.Path, digest: str) -> dict:
    return json.loads((layout / "blobs" / digest.replace(":", "/", 1)).read_text())


def subjects(layout: pathlib.Path) -> list[dict]:
    (top,) = json.loads((layout / "index.json").read_text())["manifests"]
    index = blob(layout, top["digest"])
    found = [{"name": f"{IMAGE}:{top['annotations']['org.opencontainers.image.ref.name']}", "digest": top["digest"]}]
    for entry in index["manifests"]:
        arch = entry["platform"]["architecture"]
        found.append({"name": f"{IMAGE} (linux/{arch})", "digest": entry["digest"]})
    return [{"name": s["name"], "digest": {"sha256": s["digest"].removeprefix("sha256:")}} for s in found]


def debian_dependencies(debs: pathlib.Path) -> list[dict]:
    found = []
    for listing in sorted(debs.glob("debian-*.debs")):
        for line in listing.read_text().splitlines():
            name, version, arch, digest = line.split()
            found.append({"uri": f"pkg:deb/debian/{name}@{version}?arch={arch}", "digest": {"sha256": digest}})
    return found


def main(layout: pathlib.Path, commit: str, lock: pathlib.Path, debs: pathlib.Path) -> None:
    epoch = int(os.environ["SOURCE_DATE_EPOCH"])
    when = source_date()
    go = subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout.strip()
    statement = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": subjects(layout),
        "predicateType": "https://slsa.dev/provenance/v1",
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {
                    "source": {"uri": f"git+{REPOSITORY}", "digest": {"gitCommit": commit}},
                    "platforms": [s["name"].split("(")[1].rstrip(")") for s in subjects(layout)[1:]],
                },
                "internalParameters": {
                    "SOURCE_DATE_EPOCH": epoch,
                    "debianMirror": os.environ.get("DEBIAN_MIRROR", "http://deb.debian.org/debian"),
                    "python": f"{platform.python_implementation()} {platform.python_version()} (bytecode)",
                    "go": go,
                },
                "resolvedDependencies": [
                    {"uri": f"git+{REPOSITORY}@{commit}", "digest": {"gitCommit": commit}},
                    {
                        "uri": "packaging/image/requirements.lock",
                        "digest": {"sha256": hashlib.sha256(lock.read_bytes()).hexdigest()},
                    },
                    *debian_dependencies(debs),
                ],
            },
            "runDetails": {
                "builder": {"id": f"{REPOSITORY}/blob/main/packaging/release.sh"},
                "metadata": {"invocationID": commit, "startedOn": when, "finishedOn": when},
            },
        },
    }
    json.dump(statement, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3]), pathlib.Path(sys.argv[4]))
