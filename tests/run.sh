#!/usr/bin/env bash
# `make test`: ruff, mypy (hack/typecheck.py) and import-linter first, then seven pytest runs side by side, so
# that the cores work while the others wait on clusters. Each run is a marker expression
# over what the tests need (pyproject.toml's markers; tests/support/needs.py checks that every
# test carries what it uses), and the six expressions split the tests with none in two:
#   - four host lanes: what needs processes on the host (operator processes against the real
#     nodes, etcd processes, a containerd of its own), split by the markers `lane2`, `lane4` and
#     `lane5`, set on modules to balance the lanes by their times (hack/lane_times.py prints them
#     at the end; a new module goes to the first lane); the first starts with the etcd processes,
#     the second with the containerd, the third with the control-plane tests of
#     tests/nodes/host_operator; the first is reported here as it runs. Most of a host lane's
#     time is waiting on clusters, so four share the two cores;
#   - the other tests on the real nodes (the chart's release among them), and the host modules
#     marked `lane3` (moved there to balance it with the host lanes), reported after; the
#     runs share the one real-node instance (tests/support/shared_real_nodes.py), and no test
#     starts another;
#   - the pure tests, needing none of it (unit, simulator, image, checker, the harness's pure
#     ones in e2e/tests), niced, as two runs (the simulator apart), reported last.
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

# The six marker expressions, by what their tests need; every test is in exactly one (lane3, lane2,
# lane4 and lane5 first, then the host, then the real-node instance, and the pure runs take what
# none of them does).
on_host="needs_operator_process or needs_etcd or needs_containerd"
on_the_instance="needs_cluster or needs_nodes"
balanced="lane2 or lane3 or lane4 or lane5"
host1_lane="not ($balanced) and ($on_host)"
host2_lane="lane2 and not lane3"
host3_lane="lane4 and not lane2 and not lane3"
host4_lane="lane5 and not lane2 and not lane3 and not lane4"
real_lane="lane3 or (not ($balanced) and not ($on_host) and ($on_the_instance))"
pure_lane="not ($balanced) and not ($on_host) and not ($on_the_instance)"

real_log="$(mktemp -t real-node-tests.XXXXXX.log)"
host2_log="$(mktemp -t host-tests-2.XXXXXX.log)"
host3_log="$(mktemp -t host-tests-3.XXXXXX.log)"
host4_log="$(mktemp -t host-tests-4.XXXXXX.log)"
pure_log="$(mktemp -t pure-tests.XXXXXX.log)"
sim_log="$(mktemp -t pure-sim-tests.XXXXXX.log)"
echo "tests: the second, third and fourth host lanes, the real-node tests and the pure tests (niced, the simulator" \
  "apart) run beside; their reports follow (logs: $host2_log, $host3_log, $host4_log, $real_log, $pure_log, $sim_log)"
timed "$real_log.seconds" "$python" -m pytest -p no:cacheprovider -m "$real_lane" --junitxml="$real_log.xml" >"$real_log" 2>&1 &
real=$!
timed "$host2_log.seconds" "$python" -m pytest -p no:cacheprovider -m "$host2_lane" --junitxml="$host2_log.xml" >"$host2_log" 2>&1 &
host2=$!
timed "$host3_log.seconds" "$python" -m pytest -p no:cacheprovider -m "$host3_lane" --junitxml="$host3_log.xml" >"$host3_log" 2>&1 &
host3=$!
timed "$host4_log.seconds" "$python" -m pytest -p no:cacheprovider -m "$host4_lane" --junitxml="$host4_log.xml" >"$host4_log" 2>&1 &
host4=$!
# The pure tests as two processes, the simulator apart: while the real-node run has the nodes to
# itself, the host lanes wait and a single pure process cannot use the idle core.
timed "$pure_log.seconds" nice -n 10 "$python" -m pytest -p no:cacheprovider -m "$pure_lane" --ignore=tests/sim \
  >"$pure_log" 2>&1 &
pure=$!
timed "$sim_log.seconds" nice -n 10 "$python" -m pytest -p no:cacheprovider -m "$pure_lane" tests/sim >"$sim_log" 2>&1 &
sim=$!
trap 'kill "$host2" "$host3" "$host4" "$real" "$pure" "$sim" 2>/dev/null; exit 130' INT TERM
host_seconds_file="$(mktemp -t host-tests-seconds.XXXXXX)"
host_log="$(mktemp -t host-tests-1.XXXXXX.log)"
timed "$host_seconds_file" "$python" -m pytest -m "$host1_lane" --junitxml="$host_log.xml" 2>&1 | tee "$host_log"
host_rc="${PIPESTATUS[0]}"
host_rc="$(status "$host_rc")"
wait "$host2"
host2_rc="$(status $?)"
wait "$host3"
host3_rc="$(status $?)"
wait "$host4"
host4_rc="$(status $?)"
wait "$real"
real_rc="$(status $?)"
wait "$pure"
pure_rc="$(status $?)"
wait "$sim"
sim_rc="$(status $?)"
echo "=================== the second host lane ==================="
cat "$host2_log"
echo "=================== the third host lane ==================="
cat "$host3_log"
echo "=================== the fourth host lane ==================="
cat "$host4_log"
echo "=================== the tests on the real nodes ==================="
cat "$real_log"
echo "=================== the pure tests (unit, image, checker) ==================="
cat "$pure_log"
echo "=================== the simulator ==================="
cat "$sim_log"
# Last, where a short tail of the output (CI's) still shows them: each lane's failed tests.
for lane_log in "$host_log" "$host2_log" "$host3_log" "$host4_log" "$real_log" "$pure_log" "$sim_log"; do
  grep -E '^(FAILED|ERROR) ' "$lane_log" | sed "s|^|tests: in $(basename "$lane_log" | cut -d. -f1): |"
done
echo "tests: host lanes exit $host_rc, $host2_rc, $host3_rc and $host4_rc, real nodes exit $real_rc, pure exit $pure_rc and $sim_rc"
echo "tests: lint ${lint_seconds}s; lanes side by side: host operators $(cat "$host_seconds_file")s," \
  "$(cat "$host2_log.seconds")s, $(cat "$host3_log.seconds")s and $(cat "$host4_log.seconds")s, real nodes and the chart $(cat "$real_log.seconds")s," \
  "pure $(cat "$pure_log.seconds")s and simulator $(cat "$sim_log.seconds")s"
# Where each lane's time went, by module: what the lane markers are balanced by.
"$python" hack/lane_times.py "host1=$host_log.xml" "host2=$host2_log.xml" "host3=$host3_log.xml" \
  "host4=$host4_log.xml" "real=$real_log.xml" | sed 's/^/tests: by module, /'
for rc in "$host_rc" "$host2_rc" "$host3_rc" "$host4_rc" "$real_rc" "$pure_rc" "$sim_rc"; do
  [[ $rc -eq 0 ]] || exit "$rc"
done
exit 0
