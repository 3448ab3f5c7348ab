#!/usr/bin/env bash
# `make image`: the operator's OCI image without Docker and without a registry base image.
# A Debian root filesystem from Debian packages (mmdebstrap), the package and its
# dependencies installed with pip, then an OCI layout written with umoci and packed as an
# OCI archive (tar of the layout). It describes the same image as the Dockerfile: Python
# 3.11, etcd-replay-apply built with the local Go, user 65532:65532, entrypoint
# `python -m etcd_operator`, port 8080.
# Cached by a hash of its inputs, like testbin: an unchanged tree is not rebuilt.
#
#   packaging/image/build.sh          build unless cached; print the archive's path
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cache="${ETCD_OPERATOR_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/etcd-operator/image}"
suite=bookworm
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
packages=python3,python-is-python3,ca-certificates,tzdata
version="$(awk -F'"' '/^version = /{print $2; exit}' "$root/pyproject.toml")"
tag="$version"
python="${PYTHON:-$root/.venv/bin/python}"
# Wheels for Debian bookworm's glibc (2.36) on x86_64; packaging/image/lock.sh pins with the same.
platforms="--platform manylinux_2_36_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform linux_x86_64"

for tool in mmdebstrap umoci; do
  command -v "$tool" >/dev/null || { echo "image: $tool is missing (apt-get install mmdebstrap umoci)" >&2; exit 1; }
done

stamp="$( { cat "$0" "$root/pyproject.toml" "$root/README.md" "$root/packaging/image/requirements.lock";
            (cd "$root" && git ls-files -co --exclude-standard etcd_operator etcd_operator_kubectl cmd | LC_ALL=C sort | xargs cat);
            echo "$suite $packages"; } | sha256sum | cut -c1-12)"
out="$cache/$stamp"
archive="$out/etcd-operator-$tag.oci.tar"
# One build at a time per cache: `make test` builds it from two pytest runs at once.
mkdir -p "$cache" && exec 9>"$cache/.build.lock" && flock 9
if [[ -f "$out/.complete" ]]; then
  echo "image: up to date ($archive, $(du -h "$archive" | cut -f1))" >&2
  echo "$archive"
  exit 0
fi

rm -rf "$out" && mkdir -p "$out"
log="$out/build.log"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
started=$SECONDS
step() { printf 'image: %-44s' "$1" >&2; }
done_step() { echo " $((SECONDS - t0))s" >&2; }
fail() { echo " FAILED; log: $log" >&2; tail -n 20 "$log" >&2; exit 1; }

# The Debian part changes only with this script's Debian settings: cached on its own, so a
# change to the operator's code re-runs pip and umoci only.
base_stamp="$(echo "$suite $packages $mirror $(sed -n '/^mmdebstrap/,/^done_step/p' "$0")" | sha256sum | cut -c1-12)"
base="$cache/debian-$suite-$base_stamp.tar"
t0=$SECONDS; step "Debian $suite root filesystem (mmdebstrap)"
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || date +%s)}"
if [[ ! -f "$base" ]]; then
mmdebstrap --variant=minbase --include="$packages" \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
  --customize-hook='chroot "$1" groupadd --gid 65532 nonroot' \
  --customize-hook='chroot "$1" useradd --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin nonroot' \
  --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/var/log/*' \
  "$suite" "${base%.tar}.partial.tar" "$mirror" >>"$log" 2>&1 || fail
mv "${base%.tar}.partial.tar" "$base"
fi
mkdir "$work/rootfs" && tar --numeric-owner -xpf "$base" -C "$work/rootfs" >>"$log" 2>&1 || fail
done_step

t0=$SECONDS; step "etcd-operator $version and its dependencies (pip)"
site="$work/rootfs/usr/local/lib/python3.11/dist-packages"  # on Debian's python3 sys.path
# The dependencies exactly as packaging/image/requirements.lock pins them (hashes required, the
# same platform tags as packaging/image/lock.sh), then the operator's own wheel without them.
{ "$python" -m pip wheel --quiet --no-deps --wheel-dir "$work/wheel" "$root" &&
  "$python" -m pip install --quiet --no-compile --no-warn-script-location --target "$site" \
    --only-binary=:all: --python-version 3.11 --implementation cp $platforms \
    --require-hashes --no-deps -r "$root/packaging/image/requirements.lock" &&
  "$python" -m pip install --quiet --no-compile --no-warn-script-location --target "$site" \
    --no-deps --only-binary=:all: --python-version 3.11 --implementation cp $platforms "$work"/wheel/*.whl &&
  rm -rf "$site/bin" && find "$site" -name '__pycache__' -prune -exec rm -rf {} + &&
  # Bytecode by the image's own interpreter: a process that compiles its imports at every
  # start (the root filesystem is read-only) keeps about 26 MiB more resident.
  chroot "$work/rootfs" python3 -m compileall -q -j 0 /usr/local/lib/python3.11/dist-packages; } >>"$log" 2>&1 || fail
[[ "$(chroot "$work/rootfs" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')" == 3.11 ]] || {
  echo " the Debian python3 is not 3.11" >&2; exit 1; }
done_step

t0=$SECONDS; step "etcd-replay-apply (go build)"
# The point-in-time replay's writer into a restored backend (cmd/etcd-replay-apply).
apply_binary="$("$root/cmd/etcd-replay-apply/build.sh" 2>>"$log")" || fail
install -m 0755 "$apply_binary" "$work/rootfs/usr/local/bin/etcd-replay-apply" >>"$log" 2>&1 || fail
done_step

t0=$SECONDS; step "OCI layout (umoci) and archive"
layout="$work/oci"
{ umoci init --layout "$layout" &&
  umoci new --image "$layout:$tag" &&
  umoci insert --image "$layout:$tag" "$work/rootfs" / &&
  umoci config --image "$layout:$tag" --author etcd-operator --os linux --architecture amd64 \
    --config.user 65532:65532 --config.workingdir / \
    --config.entrypoint python --config.entrypoint -m --config.entrypoint etcd_operator \
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.env PYTHONDONTWRITEBYTECODE=1 --config.env PYTHONUNBUFFERED=1 \
    --config.exposedports 8080/tcp \
    --config.label org.opencontainers.image.title=etcd-operator \
    --config.label "org.opencontainers.image.version=$version" &&
  umoci gc --layout "$layout" &&
  tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
      -C "$layout" -cf "$archive" . ; } >>"$log" 2>&1 || fail
done_step

touch "$out/.complete"
ln -sfn "$stamp" "$cache/latest"
echo "image: built $archive ($(du -h "$archive" | cut -f1)) in $((SECONDS - started))s" >&2
echo "$archive"
