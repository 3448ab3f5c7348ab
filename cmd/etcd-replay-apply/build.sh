#!/usr/bin/env bash
# Builds etcd-replay-apply (main.go here) with the local Go, its modules through the Go
# module proxy, cached by a hash of this folder: an unchanged program is not rebuilt.
# Prints the binary's path. `make image` puts it in the operator's image; the bench and the
# tests that run the replay outside a pod take it from here.
#
#   cmd/etcd-replay-apply/build.sh             for this machine's architecture
#   GOARCH=arm64 cmd/etcd-replay-apply/build.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
command -v go >/dev/null || { echo "etcd-replay-apply: go is missing (https://go.dev/dl)" >&2; exit 1; }
arch="${GOARCH:-$(go env GOARCH)}"
stamp="$(cat "$here"/go.mod "$here"/go.sum "$here"/*.go "$0" | sha256sum | cut -c1-12)"
cache="${ETCD_OPERATOR_REPLAY_APPLY:-${XDG_CACHE_HOME:-$HOME/.cache}/etcd-operator/replay-apply}/$stamp-$arch"
binary="$cache/etcd-replay-apply"
mkdir -p "$cache" && exec 9>"$cache/.build.lock" && flock 9
if [[ ! -x "$binary" ]]; then
  (cd "$here" && CGO_ENABLED=0 GOARCH="$arch" GOFLAGS=-mod=readonly \
    go build -trimpath -ldflags "-s -w" -o "$binary.partial" .) >"$cache/build.log" 2>&1 ||
    { echo "etcd-replay-apply: go build failed; log: $cache/build.log" >&2; tail -n 20 "$cache/build.log" >&2; exit 1; }
  mv "$binary.partial" "$binary"
fi
echo "$binary"
