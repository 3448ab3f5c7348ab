#!/usr/bin/env bash
# `make test`: ruff, mypy (hack/typecheck.py) and import-linter first, then eight pytest runs side by side, so
# that the cores work while the others wait on clusters. Each run is a marker expression
# over what the tests need (pyproject.toml's markers; tests/support/needs.py checks that every
# test carries what it uses), and the seven expressions split the tests with none in two:
#   - five host lanes: what needs processes on the host (operator processes against the real
#     nodes, etcd processes, a containerd of its own), split by the markers `lane2`, `lane4`,
#     `lane5` and `lane6`, set on modules to balance the lanes by their times (hack/lane_times.py prints them
#     at the end; a new module goes to the first lane); the first starts with the etcd processes,
#     the second with the containerd, the third with the control-plane tests of
#     tests/nodes/host_operator; the first is reported here as it runs. Most of a host lane's
#     time is waiting on clusters, so five share the two cores;
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

# The seven marker expressions, by what their tests need; every test is in exactly one (lane3, lane2,
# lane4, lane5 and lane6 first, then the host, then the real-node instance, and the pure runs take what
# none of them does).
on_host="needs_operator_process or needs_etcd or needs_containerd"
on_the_instance="needs_cluster or needs_nodes"
balanced="lane2 or lane3 or lane4 or lane5 or lane6"
host1_lane="not ($balanced) and ($on_host)"
host2_lane="lane2 and not lane3"
host3_lane="lane4 and not lane2 and not lane3"
host4_lane="lane5 and not lane2 and not lane3 and not lane4"
host5_lane="lane6 and not lane2 and not lane3 and not lane4 and not lane5"
real_lane="lane3 or (not ($balanced) and not ($on_host) and ($on_the_instance))"
pure_lane="not ($balanced) and not ($on_host) and not ($on_the_instance)"

# The runs beside the first host lane: each one's log is LOG[name], its process PID[name], its wall
# time in LOG[name].seconds, and a substrate run's JUnit XML XML[name] (hack/lane_times.py reads them).
declare -A LOG PID XML
beside() {
  local name="$1" title="$2"
  shift 2
  LOG[$name]="$(mktemp -t "$title.XXXXXX.log")"
  timed "${LOG[$name]}.seconds" "$@" >"${LOG[$name]}" 2>&1 &
  PID[$name]=$!
}
substrate_runs=(host2 host3 host4 host5 real)
reported=(host2 host3 host4 host5 real pure sim)
declare -A EXPRESSION=([host2]="$host2_lane" [host3]="$host3_lane" [host4]="$host4_lane" [host5]="$host5_lane" [real]="$real_lane")
declare -A TITLE=([host2]=host-tests-2 [host3]=host-tests-3 [host4]=host-tests-4 [host5]=host-tests-5 [real]=real-node-tests)
for run in "${substrate_runs[@]}"; do
  log_xml="$(mktemp -u -t "${TITLE[$run]}.XXXXXX").xml"
  beside "$run" "${TITLE[$run]}" "$python" -m pytest -p no:cacheprovider -m "${EXPRESSION[$run]}" --junitxml="$log_xml"
  XML[$run]="$log_xml"
done
# The pure tests as two processes, the simulator apart: while the real-node run has the nodes to
# itself, the host lanes wait and a single pure process cannot use the idle core.
beside pure pure-tests nice -n 10 "$python" -m pytest -p no:cacheprovider -m "$pure_lane" --ignore=tests/sim
beside sim pure-sim-tests nice -n 10 "$python" -m pytest -p no:cacheprovider -m "$pure_lane" tests/sim
echo "tests: the second to fifth host lanes, the real-node tests and the pure tests (niced, the simulator apart) run" \
  "beside; their reports follow (logs: $(for run in "${reported[@]}"; do printf '%s ' "${LOG[$run]}"; done))"
trap 'kill "${PID[@]}" 2>/dev/null; exit 130' INT TERM
host_seconds_file="$(mktemp -t host-tests-seconds.XXXXXX)"
host_log="$(mktemp -t host-tests-1.XXXXXX.log)"
LOG[host1]="$host_log" XML[host1]="$host_log.xml"
timed "$host_seconds_file" "$python" -m pytest -m "$host1_lane" --junitxml="${XML[host1]}" 2>&1 | tee "$host_log"
host_rc="${PIPESTATUS[0]}"
declare -A RC=([host1]="$(status "$host_rc")")
for run in "${!PID[@]}"; do
  wait "${PID[$run]}"
  RC[$run]="$(status $?)"
done
declare -A HEADING=([host2]="the second host lane" [host3]="the third host lane" [host4]="the fourth host lane"
  [host5]="the fifth host lane" [real]="the tests on the real nodes" [pure]="the pure tests (unit, image, checker)"
  [sim]="the simulator")
for run in "${reported[@]}"; do
  echo "=================== ${HEADING[$run]} ==================="
  cat "${LOG[$run]}"
done
# Last, where a short tail of the output (CI's) still shows them: each run's failed tests.
for run in host1 "${reported[@]}"; do
  grep -E '^(FAILED|ERROR) ' "${LOG[$run]}" | sed "s|^|tests: in $(basename "${LOG[$run]}" | cut -d. -f1): |"
done
seconds() { cat "${LOG[$1]}.seconds"; }
echo "tests: host lanes exit ${RC[host1]}, ${RC[host2]}, ${RC[host3]}, ${RC[host4]} and ${RC[host5]}, real nodes exit" \
  "${RC[real]}, pure exit ${RC[pure]} and ${RC[sim]}"
echo "tests: lint ${lint_seconds}s; lanes side by side: host operators $(cat "$host_seconds_file")s, $(seconds host2)s," \
  "$(seconds host3)s, $(seconds host4)s and $(seconds host5)s, real nodes and the chart $(seconds real)s," \
  "pure $(seconds pure)s and simulator $(seconds sim)s"
# Where each lane's time went, by module: what the lane markers are balanced by.
"$python" hack/lane_times.py "host1=${XML[host1]}" "host2=${XML[host2]}" "host3=${XML[host3]}" "host4=${XML[host4]}" \
  "host5=${XML[host5]}" "real=${XML[real]}" | sed 's/^/tests: by module, /'
for rc in "${RC[@]}"; do
  [[ $rc -eq 0 ]] || exit "$rc"
done
exit 0
