#!/usr/bin/env bash
# Writes packaging/image/requirements.lock: every Python dependency of the operator image, pinned
# with the sha256 of each file pip picks for the image (CPython 3.11, wheels only) on linux x86_64
# and aarch64, as packaging/image/build.sh and build-release.sh install them with --require-hashes.
# Both architectures must resolve to the same versions. Run it after changing the dependencies in
# pyproject.toml and commit the result (tests/unit/test_release_metadata.py checks it still
# matches). The versions already locked are kept (a constraint); delete a line to move its pin.
#
#   packaging/image/lock.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
lock="$root/packaging/image/requirements.lock"
grep -E '^[a-z0-9._-]+==' "$lock" 2>/dev/null | sed 's/ .*//' >"$work/constraints.txt" || true
for arch in x86_64 aarch64; do
  "$python" -m pip install --quiet --dry-run --ignore-installed --report "$work/$arch.json" \
    --only-binary=:all: --python-version 3.11 --implementation cp --platform "manylinux_2_36_$arch" \
    --platform "manylinux_2_17_$arch" --platform "manylinux2014_$arch" --platform "linux_$arch" -c "$work/constraints.txt" "$root"
done
"$python" - "$work"/x86_64.json "$work"/aarch64.json >"$work/lock" <<'PY'
import json
import sys

pins = {}
for report in sys.argv[1:]:
    for item in json.load(open(report))["install"]:
        meta = item["metadata"]
        if meta["name"] == "etcd-operator":
            continue
        name = meta["name"].lower()
        version, hashes = pins.setdefault(name, (meta["version"], set()))
        if version != meta["version"]:
            sys.exit(f"lock: {name} resolves to {version} on one architecture and {meta['version']} on another")
        hashes.add(item["download_info"]["archive_info"]["hashes"]["sha256"])
print("# The operator image's Python dependencies, pinned with hashes for linux x86_64 and aarch64")
print("# (packaging/image/lock.sh writes it; the image builds install them with --require-hashes).")
print("# Do not edit by hand.")
for name, (version, hashes) in sorted(pins.items()):
    lines = [f"{name}=={version}"] + [f"    --hash=sha256:{digest}" for digest in sorted(hashes)]
    print(" \\\n".join(lines))
PY
mv "$work/lock" "$lock"
echo "lock: wrote packaging/image/requirements.lock" >&2
