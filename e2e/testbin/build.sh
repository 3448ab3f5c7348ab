#!/usr/bin/env bash
# Builds the pinned local-substrate binaries from their Go modules and caches them
# outside git. A recipe is rebuilt only when its go.mod, go.sum or this table changes.
#
#   testbin/build.sh            build what is missing, print where the binaries are
#   testbin/build.sh --dir      print the cache directory only
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${ETCD_OPERATOR_TESTBIN:-${XDG_CACHE_HOME:-$HOME/.cache}/etcd-operator/testbin}"

if [[ "${1:-}" == "--dir" ]]; then
  echo "$cache"
  exit 0
fi

kube_version="$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$here/kube/go.mod")"
kube_minor="$(echo "$kube_version" | cut -d. -f2)"
kube_ldflags="-s -w \
 -X k8s.io/component-base/version.gitVersion=$kube_version \
 -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=$kube_minor \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=$kube_version"

# recipe | binary | package | ldflags
binaries="
kube|kube-apiserver|k8s.io/kubernetes/cmd/kube-apiserver|$kube_ldflags
kube|kube-controller-manager|k8s.io/kubernetes/cmd/kube-controller-manager|$kube_ldflags
kube|kubectl|k8s.io/kubernetes/cmd/kubectl|$kube_ldflags
etcd-3.5|etcd|go.etcd.io/etcd/server/v3|-s -w
etcd-3.5|etcdctl|go.etcd.io/etcd/etcdctl/v3|-s -w
etcd-3.5|etcdutl|go.etcd.io/etcd/etcdutl/v3|-s -w
etcd-3.6|etcd|go.etcd.io/etcd/server/v3|-s -w
etcd-3.6|etcdctl|go.etcd.io/etcd/etcdctl/v3|-s -w
etcd-3.6|etcdutl|go.etcd.io/etcd/etcdutl/v3|-s -w
minio|minio|github.com/minio/minio|-s -w
"

recipe_stamp() {
  local recipe="$1"
  {
    cat "$here/$recipe/go.mod" "$here/$recipe/go.sum"
    echo "$binaries" | grep "^$recipe|"
    go env GOVERSION
  } | sha256sum | cut -c1-12
}

mkdir -p "$cache"
for recipe in kube etcd-3.5 etcd-3.6 minio; do
  out="$cache/$recipe-$(recipe_stamp "$recipe")"
  if [[ ! -f "$out/.complete" ]]; then
    echo ">> building $recipe into $out" >&2
    rm -rf "$out" && mkdir -p "$out"
    while IFS='|' read -r r name pkg ldflags; do
      [[ "$r" == "$recipe" ]] || continue
      (cd "$here/$recipe" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$out/$name" "$pkg")
    done <<<"$binaries"
    touch "$out/.complete"
  fi
  ln -sfn "$(basename "$out")" "$cache/$recipe"
done

echo "testbin binaries are in $cache:" >&2
for recipe in kube etcd-3.5 etcd-3.6 minio; do
  echo "  $cache/$recipe/ ($(ls "$cache/$recipe" | tr '\n' ' '))" >&2
done
echo "$cache"
