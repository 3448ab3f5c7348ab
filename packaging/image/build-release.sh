#!/usr/bin/env bash
# The release image: the operator for linux/amd64 and linux/arm64 as one OCI image index, in an
# OCI image layout. Distroless: Debian's python3.11 and the libraries it links, extracted without
# running any package script (so arm64 needs no emulation), no shell, no package manager, user
# 65532, the operator's dependencies from packaging/image/requirements.lock (hashes required),
# bytecode compiled ahead (the root filesystem is read-only), etcd-replay-apply cross-compiled.
# Reproducible: every file is dated SOURCE_DATE_EPOCH and the archives carry no build time.
#
#   packaging/image/build-release.sh SRC LAYOUT REVISION
#   IMAGE_ARCHES=amd64 packaging/image/build-release.sh ...   (make image: this machine's only)
#   DEBS_OUT=DIR ...    also writes DIR/debian-ARCH.debs: each Debian package's version and .deb sha256
#   SBOM_OUT=DIR SYFT=PATH ...   also writes DIR/etcd-operator-VERSION-linux-ARCH.spdx.json (sbom.py)
# SRC is the release's source tree, REVISION its commit; prints the index's digest.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$(realpath "$1")"
layout="$(realpath -m "$2")"
: "${SOURCE_DATE_EPOCH:?the release sets it to the commit time}"
python="${PYTHON:-$here/../../.venv/bin/python}"
cache="${ETCD_OPERATOR_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/etcd-operator/image}"
suite=bookworm
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
packages=(base-files netbase python3.11-minimal libpython3.11-stdlib libstdc++6)
read -r -a arches <<<"${IMAGE_ARCHES:-amd64 arm64}"
declare -A wheel_arch=([amd64]=x86_64 [arm64]=aarch64)
version="$(awk -F'"' '/^version = /{print $2; exit}' "$src/pyproject.toml")"
revision="$3"

for tool in mmdebstrap dpkg-deb go; do
  command -v "$tool" >/dev/null || { echo "release image: $tool is missing (make host-packages)" >&2; exit 1; }
done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
log="$work/build.log"
fail() { echo "release image: $1 failed:" >&2; tail -n 30 "$log" >&2; exit 1; }

"$python" -m pip wheel --quiet --no-deps --wheel-dir "$work/wheel" "$src" >>"$log" 2>&1 || fail "the operator's wheel"
trees=()
for arch in "${arches[@]}"; do
  # The Debian part, cached by what decides it (suite, packages, mirror, the trimming).
  stamp="$(cat "$here/rootfs.py" <(echo "$suite $mirror ${packages[*]} $arch") | sha256sum | cut -c1-12)"
  debian="$cache/distroless-$suite-$arch-$stamp.tar"
  mkdir -p "$cache"
  exec 8>"$debian.lock" && flock 8  # make test builds it from two runs at once
  if [[ ! -f "$debian" || ! -f "${debian%.tar}.debs" ]]; then
    rm -rf "$work/debian" && mkdir "$work/debian"
    mmdebstrap --variant=extract --architectures="$arch" --include="$(IFS=,; echo "${packages[*]}")" \
      --skip=cleanup/apt "$suite" "$work/debian" "$mirror" >>"$log" 2>&1 || fail "mmdebstrap ($arch)"
    "$python" "$here/rootfs.py" "$work/debian" "${debian%.tar}.debs" "${packages[@]}" >>"$log" 2>&1 ||
      fail "rootfs.py ($arch)"
    tar --numeric-owner -C "$work/debian" -cf "$debian.partial" . && mv "$debian.partial" "$debian"
    rm -rf "$work/debian"
  fi
  exec 8>&-
  root="$work/rootfs-$arch"
  mkdir "$root" && tar --numeric-owner -xpf "$debian" -C "$root"

  site="$root/usr/local/lib/python3.11/dist-packages"  # on Debian's python3.11 sys.path
  w="${wheel_arch[$arch]}"
  platforms=(--platform "manylinux_2_36_$w" --platform "manylinux_2_17_$w" --platform "manylinux2014_$w" --platform "linux_$w")
  { "$python" -m pip install --quiet --no-compile --no-warn-script-location --target "$site" \
      --only-binary=:all: --python-version 3.11 --implementation cp "${platforms[@]}" \
      --require-hashes --no-deps -r "$src/packaging/image/requirements.lock" &&
    "$python" -m pip install --quiet --no-compile --no-warn-script-location --target "$site" \
      --no-deps --only-binary=:all: --python-version 3.11 --implementation cp "${platforms[@]}" "$work"/wheel/*.whl &&
    rm -rf "$site/bin" "$site"/etcd_operator-*.dist-info/direct_url.json &&
    sed -i '/direct_url.json/d' "$site"/etcd_operator-*.dist-info/RECORD; } >>"$log" 2>&1 || fail "pip ($arch)"

  apply_binary="$(GOARCH="$arch" "$src/cmd/etcd-replay-apply/build.sh" 2>>"$log")" || fail "etcd-replay-apply ($arch)"
  install -D -m 0755 "$apply_binary" "$root/usr/local/bin/etcd-replay-apply"

  ln -s python3.11 "$root/usr/bin/python3" && ln -s python3.11 "$root/usr/bin/python"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$root/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$root/etc/group"
  printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
  # Mozilla's CA bundle (the locked certifi's) where Debian's OpenSSL looks for it.
  install -D -m 0644 "$site/certifi/cacert.pem" "$root/etc/ssl/certs/ca-certificates.crt"
  install -d -m 0755 "$root/home/nonroot"
  install -d -m 1777 "$root/tmp"

  # Bytecode for the standard library and the packages (the image cannot write it): this
  # Python is 3.11 like the image's, whose bytecode format is the same for every 3.11 release;
  # hash-based and never checked against the source, so the build time is not in it.
  "$python" -m compileall -q -j 0 --invalidation-mode unchecked-hash -s "$root" -p / \
    "$root/usr/lib/python3.11" "$site" >>"$log" 2>&1 || fail "compileall ($arch)"

  if [[ -n "${SBOM_OUT:-}" ]]; then
    "$python" "$here/sbom.py" "$SYFT" "$root" "$version" "$arch" "$SBOM_OUT/etcd-operator-$version-linux-$arch.spdx.json" \
      >>"$log" 2>&1 || fail "the SBOM ($arch)"
  fi

  tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --clamp-mtime --owner=0 --group=0 --numeric-owner \
      --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
      -C "$root" -cf "$work/rootfs-$arch.tar" . >>"$log" 2>&1 || fail "the layer ($arch)"
  trees+=("$arch=$work/rootfs-$arch.tar")
  [[ -z "${DEBS_OUT:-}" ]] || cp "${debian%.tar}.debs" "$DEBS_OUT/debian-$arch.debs"
done

rm -rf "$layout"
"$python" "$here/oci_layout.py" image "$layout" "$version" "$revision" "${trees[@]}"
