#!/usr/bin/env bash
# `make test`: the pure tests (unit, simulator, image and checker; no substrate) run niced
# beside the tests against the substrate, so that the second core works while those wait on
# clusters. With arguments, one pytest run of exactly those, as before.
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

log="$(mktemp -t pure-tests.XXXXXX.log)"
echo "tests: the pure tests run beside, niced; their report follows (log: $log)"
nice -n 10 "$python" -m pytest -p no:cacheprovider -m "not substrate and not real_nodes" >"$log" 2>&1 &
pure=$!
trap 'kill "$pure" 2>/dev/null; exit 130' INT TERM
"$python" -m pytest -m "substrate or real_nodes"
substrate_rc="$(status $?)"
wait "$pure"
pure_rc="$(status $?)"
echo "=================== the pure tests (unit, simulator, image, checker) ==================="
cat "$log"
echo "tests: substrate exit $substrate_rc, pure exit $pure_rc"
[[ $substrate_rc -eq 0 ]] || exit "$substrate_rc"
exit "$pure_rc"
