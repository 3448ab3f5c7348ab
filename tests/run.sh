#!/usr/bin/env bash
# `make test`: ruff, mypy (hack/typecheck.py) and import-linter first, then four pytest runs side by side, so
# that the second core works while the others wait on clusters:
#   - two host lanes (marked substrate), side by side: operator processes on the host against
#     the real nodes (tests/nodes/host_operator), its modules split between the two by the list
#     below; the first starts with the etcd processes on the host (tests/etcd_processes), the
#     second with a containerd of its own (e2e/tests) and the tests that need only the control
#     plane; the first is reported here as it runs, the second after;
#   - the tests on the real nodes with the chart's release, reported after; the two runs share
#     the one real-node instance (tests/support/shared_real_nodes.py), and no test starts another;
#   - the pure tests (unit, simulator, image, checker and the harness's pure ones in e2e/tests;
#     no substrate), niced, reported last.
# Each operator process watches only its test's namespace, so the lanes' tests share the real
# nodes as the chart's run and the host's always did. With arguments, one pytest run of exactly those.
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

# The second host lane: these paths; the first: every other substrate test. Balanced by the
# modules' times in a full run (a new module goes to the first lane).
second_host_lane=(
  e2e/tests/test_containerd_import.py
  tests/nodes/host_operator/control_plane
  tests/nodes/host_operator/test_linearizability.py
  tests/nodes/host_operator/test_backup.py
  tests/nodes/host_operator/test_hibernation.py
  tests/nodes/host_operator/test_cluster_safety.py
  tests/nodes/host_operator/test_restore_point_in_time.py
  tests/nodes/host_operator/test_restore_encrypted.py
  tests/nodes/host_operator/test_backup_object_lock.py
  tests/nodes/host_operator/test_backup_continuous.py
  tests/nodes/host_operator/test_slow_stops.py
  tests/nodes/host_operator/test_restore_watch_clients.py
  tests/nodes/host_operator/test_leader_handover.py
  tests/nodes/host_operator/test_rbac.py
  tests/nodes/host_operator/test_backup_memory.py
  tests/nodes/host_operator/test_sharding.py
  tests/nodes/host_operator/test_backup_storage.py
)
not_in_the_second=()
for path in "${second_host_lane[@]}"; do not_in_the_second+=("--ignore=$path"); done

real_log="$(mktemp -t real-node-tests.XXXXXX.log)"
host2_log="$(mktemp -t host-tests-2.XXXXXX.log)"
pure_log="$(mktemp -t pure-tests.XXXXXX.log)"
echo "tests: the second host lane, the real-node tests and the pure tests (niced) run beside;" \
  "their reports follow (logs: $host2_log, $real_log, $pure_log)"
timed "$real_log.seconds" "$python" -m pytest -p no:cacheprovider -m "real_nodes" >"$real_log" 2>&1 &
real=$!
timed "$host2_log.seconds" "$python" -m pytest -p no:cacheprovider -m "substrate and not real_nodes" \
  "${second_host_lane[@]}" >"$host2_log" 2>&1 &
host2=$!
timed "$pure_log.seconds" nice -n 10 "$python" -m pytest -p no:cacheprovider -m "not substrate and not real_nodes" \
  >"$pure_log" 2>&1 &
pure=$!
trap 'kill "$host2" "$real" "$pure" 2>/dev/null; exit 130' INT TERM
host_seconds_file="$(mktemp -t host-tests-seconds.XXXXXX)"
timed "$host_seconds_file" "$python" -m pytest -m "substrate and not real_nodes" "${not_in_the_second[@]}"
host_rc="$(status $?)"
wait "$host2"
host2_rc="$(status $?)"
wait "$real"
real_rc="$(status $?)"
wait "$pure"
pure_rc="$(status $?)"
echo "=================== the second host lane ==================="
cat "$host2_log"
echo "=================== the tests on the real nodes ==================="
cat "$real_log"
echo "=================== the pure tests (unit, simulator, image, checker) ==================="
cat "$pure_log"
echo "tests: host lanes exit $host_rc and $host2_rc, real nodes exit $real_rc, pure exit $pure_rc"
echo "tests: lint ${lint_seconds}s; lanes side by side: host operators $(cat "$host_seconds_file")s and" \
  "$(cat "$host2_log.seconds")s, real nodes and the chart $(cat "$real_log.seconds")s, pure $(cat "$pure_log.seconds")s"
for rc in "$host_rc" "$host2_rc" "$real_rc" "$pure_rc"; do
  [[ $rc -eq 0 ]] || exit "$rc"
done
exit 0
