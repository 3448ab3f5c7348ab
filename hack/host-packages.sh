#!/usr/bin/env bash
# The Debian packages this repository needs on the host, in one list: `make up` and `make demo`
# run this before building anything, and `.ci/run` runs it on a fresh machine. As root it
# installs what is missing; otherwise it stops and prints the one command to run.
#
#   hack/host-packages.sh           check, and install what is missing (root)
#   hack/host-packages.sh --list    print the packages, one per line
set -euo pipefail

packages=(
  # the tools the Makefile and the local control plane use
  ca-certificates git make openssl procps iproute2 util-linux python3 python3-venv
  # real nodes: the runtime, the CNI plugins, what kubelet and kube-proxy call
  containerd runc containernetworking-plugins iptables conntrack ethtool socat
  # images for real nodes: pause (gcc -static), busybox's image, the operator's image
  gcc libc6-dev busybox-static mmdebstrap
)

if [[ "${1:-}" == "--list" ]]; then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

if ! command -v dpkg-query >/dev/null; then
  echo "host-packages: this is not a Debian-based system; install the equivalents of:" \
    "${packages[*]}" >&2
  exit 1
fi

missing=()
for package in "${packages[@]}"; do
  status="$(dpkg-query -W -f='${db:Status-Status}' "$package" 2>/dev/null || true)"
  [[ "$status" == installed ]] || missing+=("$package")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

command="apt-get install -y --no-install-recommends ${missing[*]}"
if [[ "$(id -u)" -ne 0 ]]; then
  echo "host-packages: the local default needs Debian packages that are missing; run, then try again:" >&2
  echo "  sudo apt-get update && sudo $command" >&2
  exit 1
fi

echo "host-packages: installing ${missing[*]}" >&2
started=$SECONDS
export DEBIAN_FRONTEND=noninteractive
log="$(mktemp -t host-packages.XXXXXX.log)"
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
  echo "host-packages: apt-get failed; its output:" >&2
  tail -n 20 "$log" >&2
  exit 1
fi
rm -f "$log"
echo "host-packages: done in $((SECONDS - started))s" >&2
