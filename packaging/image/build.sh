#!/usr/bin/env bash
# `make image`: the operator's OCI image for this machine's architecture, without Docker and
# without a registry base image: the release image's build (build-release.sh, distroless) for
# one architecture, its OCI layout packed as an OCI archive (a tar of the layout) for
# `ctr import`, `skopeo copy oci-archive:` or `podman load`. The real nodes run this archive.
# Cached by a hash of its inputs, like testbin: an unchanged tree is not rebuilt.
#
#   packaging/image/build.sh          build unless cached; print the archive's path
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cache="${ETCD_OPERATOR_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/etcd-operator/image}"
version="$(awk -F'"' '/^version = /{print $2; exit}' "$root/pyproject.toml")"
arch="$(go env GOARCH 2>/dev/null || dpkg --print-architecture)"
export PYTHON="${PYTHON:-$root/.venv/bin/python}"

stamp="$( { cat "$0" "$root"/packaging/image/{build-release.sh,rootfs.py,oci_layout.py,requirements.lock} \
              "$root/pyproject.toml" "$root/README.md";
            (cd "$root" && git ls-files -co --exclude-standard etcd_operator etcd_operator_kubectl cmd | LC_ALL=C sort | xargs cat);
            echo "$arch"; } | sha256sum | cut -c1-12)"
out="$cache/$stamp"
archive="$out/etcd-operator-$version.oci.tar"
# One build at a time per cache: `make test` builds it from two pytest runs at once.
mkdir -p "$cache" && exec 9>"$cache/.build.lock" && flock 9
if [[ -f "$out/.complete" ]]; then
  echo "image: up to date ($archive, $(du -h "$archive" | cut -f1))" >&2
  echo "$archive"
  exit 0
fi

rm -rf "$out" && mkdir -p "$out"
started=$SECONDS
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || date +%s)}"
revision="$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)"
IMAGE_ARCHES="$arch" "$root/packaging/image/build-release.sh" "$root" "$out/layout" "$revision" >/dev/null
tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
    -C "$out/layout" -cf "$archive" . && rm -rf "$out/layout"
touch "$out/.complete"
ln -sfn "$stamp" "$cache/latest"
echo "image: built $archive ($(du -h "$archive" | cut -f1)) in $((SECONDS - started))s" >&2
echo "$archive"
