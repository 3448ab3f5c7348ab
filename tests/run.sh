#!/usr/bin/env bash
# `make test`: ruff, mypy (hack/typecheck.py) and import-linter first, then three pytest runs side by side, so
# that the second core works while the others wait on clusters:
#   - the host lane (marked substrate): etcd processes on the host (tests/etcd_processes) and a
#     containerd of its own (e2e/tests), then the operator as processes on the host against the
#     real nodes and the tests that need only their control plane (tests/nodes/host_operator);
#     reported here as they run;
#   - the tests on the real nodes with the chart's release, reported after; the two runs share
#     the one real-node instance (tests/support/shared_real_nodes.py), and no test starts another;
#   - the pure tests (unit, simulator, image, checker and the harness's pure ones in e2e/tests;
#     no substrate), niced, reported last.
# With arguments, one pytest run of exactly those, as before.
#
#   tests/run.sh [pytest arguments]
set -uo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-.venv/bin/python}"

# pytest's "no tests collected" (5) is not a failure here.
status() { [[ $1 -eq 5 ]] && echo 0 || echo "$1"; }

if [[ $# -gt 0 ]]; then
  "$python" -m pytest "$@"
  exit "$(status $?)"
fi

# Lint, format and types first: a finding fails the run before any substrate starts.
echo "tests: ruff (lint, format), mypy and the import layers"
lint_started=$SECONDS
"$python" -m ruff check . && "$python" -m ruff format --check . && "$python" hack/typecheck.py &&
  "$(dirname "$python")/lint-imports" --no-cache || exit 1
lint_seconds=$((SECONDS - lint_started))

# timed FILE COMMAND...: run it, write its wall time in seconds to FILE, keep its exit code.
timed() {
  local file="$1" started=$SECONDS rc=0
  shift
  "$@" || rc=$?
  echo "$((SECONDS - started))" >"$file"
  return "$rc"
}

real_log="$(mktemp -t real-node-tests.XXXXXX.log)"
pure_log="$(mktemp -t pure-tests.XXXXXX.log)"
echo "tests: the real-node tests and the pure tests (niced) run beside; their reports follow" \
  "(logs: $real_log, $pure_log)"
timed "$real_log.seconds" "$python" -m pytest -p no:cacheprovider -m "real_nodes" >"$real_log" 2>&1 &
real=$!
timed "$pure_log.seconds" nice -n 10 "$python" -m pytest -p no:cacheprovider -m "not substrate and not real_nodes" \
  >"$pure_log" 2>&1 &
pure=$!
trap 'kill "$real" "$pure" 2>/dev/null; exit 130' INT TERM
host_seconds_file="$(mktemp -t host-tests-seconds.XXXXXX)"
timed "$host_seconds_file" "$python" -m pytest -m "substrate and not real_nodes"
host_rc="$(status $?)"
wait "$real"
real_rc="$(status $?)"
wait "$pure"
pure_rc="$(status $?)"
echo "=================== the tests on the real nodes ==================="
cat "$real_log"
echo "=================== the pure tests (unit, simulator, image, checker) ==================="
cat "$pure_log"
echo "tests: host lane exit $host_rc, real nodes exit $real_rc, pure exit $pure_rc"
echo "tests: lint ${lint_seconds}s; lanes side by side: host operators $(cat "$host_seconds_file")s," \
  "real nodes and the chart $(cat "$real_log.seconds")s, pure $(cat "$pure_log.seconds")s"
for rc in "$host_rc" "$real_rc" "$pure_rc"; do
  [[ $rc -eq 0 ]] || exit "$rc"
done
exit 0
