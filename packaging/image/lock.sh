#!/usr/bin/env bash
# Writes packaging/image/requirements.lock: every Python dependency of the operator image, pinned
# with the sha256 of the file pip picks for the image (CPython 3.11, linux x86_64, wheels only),
# as packaging/image/build.sh installs it with --require-hashes. Run it after changing the
# dependencies in pyproject.toml and commit the result (tests/unit/test_release.py checks it
# still matches pyproject.toml).
#
#   packaging/image/lock.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python}"
report="$(mktemp)"
trap 'rm -f "$report"' EXIT
"$python" -m pip install --quiet --dry-run --ignore-installed --report "$report" \
  --only-binary=:all: --python-version 3.11 --implementation cp --platform manylinux_2_36_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform linux_x86_64 "$root"
"$python" - "$report" >"$root/packaging/image/requirements.lock" <<'PY'
import json
import sys

report = json.load(open(sys.argv[1]))
print("# The operator image's Python dependencies, pinned with hashes (packaging/image/lock.sh writes it;")
print("# packaging/image/build.sh installs them with --require-hashes). Do not edit by hand.")
for item in sorted(report["install"], key=lambda i: i["metadata"]["name"].lower()):
    meta = item["metadata"]
    if meta["name"] == "etcd-operator":
        continue
    digest = item["download_info"]["archive_info"]["hashes"]["sha256"]
    print(f"{meta['name'].lower()}=={meta['version']} \\\n    --hash=sha256:{digest}")
PY
echo "lock: wrote packaging/image/requirements.lock" >&2
