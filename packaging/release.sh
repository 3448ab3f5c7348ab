#!/usr/bin/env bash
# `make release`: the release artifacts of the commit HEAD, built from `git archive HEAD` (never
# from uncommitted files), reproducibly: SOURCE_DATE_EPOCH is the commit's time, tar members are
# sorted with zero owners and that mtime, gzip carries no name or time. Writes into OUT:
#   etcd-operator-VERSION.tgz            the Helm chart (helm package, then normalized)
#   kubectl_etcd-VERSION-py3-none-any.whl  the kubectl plugin alone (packaging/kubectl-etcd)
#   kubectl-etcd-VERSION.tar.gz          the plugin for krew: a launcher and the wheel's modules
#   krew.yaml                            the krew manifest, with that archive's sha256
#   requirements.lock                    the image's Python dependencies with hashes
#   etcd-operator-olm-bundle-VERSION.tar.gz  the OLM bundle (registry+v1) of hack/olm_bundle.py
#   SHA256SUMS
#   etcd-operator-VERSION.oci.tar        the image for linux/amd64 and linux/arm64 (an OCI archive)
#   etcd-operator-VERSION.provenance.json  its provenance (in-toto, SLSA v1), also attached to it
#   etcd-operator-VERSION-linux-ARCH.spdx.json  each platform's SBOM (syft), also attached to it
# RELEASE_REGISTRY=HOST[/PATH] with COSIGN_KEY (and COSIGN_PASSWORD) also pushes the image and the
# chart there, signs the image and attests its SBOMs and provenance (RELEASE_PLAIN_HTTP=1 for a
# registry without TLS).
# Not built here (docs/operations/releasing.md): the bundle's image.
#
#   packaging/release.sh [OUT]   (default build/release; ALLOW_DIRTY=1 builds HEAD from a dirty tree)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$(realpath -m "${1:-$root/build/release}")"
python="${PYTHON:-$root/.venv/bin/python}"
helm="${HELM:-$(e2e_dir="$("$root/e2e/testbin/build.sh" --dir 2>/dev/null)" && echo "$e2e_dir/helm/helm")}"
[[ -x "$helm" ]] || helm="$(command -v helm || true)"
[[ -x "$helm" ]] || { echo "release: helm is missing (make testbin builds it)" >&2; exit 1; }
testbin="$("$root/e2e/testbin/build.sh" --dir)"
syft="${SYFT:-$testbin/syft/syft}" crane="${CRANE:-$testbin/crane/crane}" cosign="${COSIGN:-$testbin/cosign/cosign}"
if [[ -n "${RELEASE_REGISTRY:-}" && -z "${COSIGN_KEY:-}" ]]; then
  echo "release: RELEASE_REGISTRY needs COSIGN_KEY (and COSIGN_PASSWORD) to sign what it pushes" >&2
  exit 1
fi
for tool in "$syft" "$crane" "$cosign"; do
  [[ -x "$tool" ]] || { echo "release: $tool is missing (make testbin builds it)" >&2; exit 1; }
done

if [[ -n "$(git -C "$root" status --porcelain --untracked-files=no)" && "${ALLOW_DIRTY:-}" != 1 ]]; then
  echo "release: the tree has uncommitted changes; commit them (the release is built from HEAD)" >&2
  exit 1
fi
commit="$(git -C "$root" rev-parse HEAD)"
export SOURCE_DATE_EPOCH="$(git -C "$root" log -1 --format=%ct "$commit")"
export TZ=UTC LC_ALL=C
umask 022

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
src="$work/src"
mkdir "$src" && git -C "$root" archive "$commit" | tar -x -C "$src"
version="$(awk -F'"' '/^version = /{print $2; exit}' "$src/pyproject.toml")"
rm -rf "$out" && mkdir -p "$out"

# repack ARCHIVE DIR: DIR's contents as a normalized tar.gz.
repack() {
  tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
      --mode='u+rwX,go+rX,go-w' --format=gnu -C "$2" -cf - . | gzip -9 -n >"$1"
}

# The chart: helm package, then unpacked and packed again without helm's timestamps.
chart_version="$(awk '/^version:/{print $2; exit}' "$src/charts/etcd-operator/Chart.yaml")"
app_version="$(awk -F'"' '/^appVersion:/{print $2; exit}' "$src/charts/etcd-operator/Chart.yaml")"
[[ "$app_version" == "$version" && "$chart_version" == "$version" ]] || {
  echo "release: Chart.yaml version $chart_version / appVersion $app_version differ from pyproject's $version" >&2; exit 1; }
"$helm" lint --strict "$src/charts/etcd-operator" >"$work/helm-lint.log" 2>&1 || { cat "$work/helm-lint.log" >&2; exit 1; }
"$helm" package "$src/charts/etcd-operator" -d "$work/chart" >/dev/null
mkdir "$work/chart/tree" && tar -xzmf "$work/chart/etcd-operator-$version.tgz" -C "$work/chart/tree"
(cd "$work/chart/tree" && tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
   --mode='u+rwX,go+rX,go-w' --format=gnu -cf - etcd-operator) | gzip -9 -n >"$out/etcd-operator-$version.tgz"

# The plugin's wheel: its own pyproject, the plugin, and the operator modules it imports.
stage="$work/kubectl-etcd"
mkdir "$stage" && cp "$src/packaging/kubectl-etcd/pyproject.toml" "$src/LICENSE" "$stage/"
"$python" "$src/packaging/kubectl-etcd/modules.py" "$src" >"$work/modules"
(cd "$src" && xargs -a "$work/modules" cp --parents -t "$stage")
"$python" -m pip wheel --quiet --no-deps --wheel-dir "$out" "$stage" >"$work/wheel.log" 2>&1 ||
  { cat "$work/wheel.log" >&2; exit 1; }
wheel="$(cd "$out" && ls kubectl_etcd-*.whl)"

# The krew archive: a launcher beside the wheel's modules (pure Python; it runs on the user's
# python3 >= 3.11 with the wheel's dependencies installed).
bundle="$work/krew"
mkdir -p "$bundle/lib" && cp "$src/LICENSE" "$bundle/"
(cd "$src" && xargs -a "$work/modules" cp --parents -t "$bundle/lib")
cat >"$bundle/kubectl-etcd" <<'LAUNCHER'
#!/bin/sh
# kubectl etcd from a krew install: the plugin's modules sit in lib/ beside this file.
here="$(cd "$(dirname "$(readlink -f "$0")")" && pwd)"
PYTHONPATH="$here/lib${PYTHONPATH:+:$PYTHONPATH}" exec "${KUBECTL_ETCD_PYTHON:-python3}" -m etcd_operator_kubectl.cli "$@"
LAUNCHER
chmod 755 "$bundle/kubectl-etcd"
archive="kubectl-etcd-$version.tar.gz"
repack "$out/$archive" "$bundle"
archive_sha="$(sha256sum "$out/$archive" | cut -d' ' -f1)"
# What the launcher's python3 needs: the wheel's Requires-Dist, read from the wheel just built.
requires="$("$python" - "$out/$wheel" <<'REQUIRES'
import re, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    metadata = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    lines = wheel.read(metadata).decode().splitlines()
names = [re.split(r"[ ;<>=!~\[(]", line.split(":", 1)[1].strip())[0] for line in lines if line.startswith("Requires-Dist:")]
print(", ".join(names[:-1]) + " and " + names[-1])
REQUIRES
)"
cat >"$out/krew.yaml" <<MANIFEST
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: etcd
spec:
  version: v$version
  homepage: https://github.com/etcd-operator/etcd-operator
  shortDescription: Day-2 commands for etcd clusters run by the etcd operator
  description: |
    Status, backups, restores, defragmentation, leader moves and snapshots of the
    EtcdClusters, EtcdBackups and EtcdRestores of the etcd operator, through its own
    resources; etcd's performance check as a Job; etcdctl sessions through a
    port-forward (with etcdctl on PATH).
    Needs python3 (3.11 or newer) with the dependencies of the kubectl-etcd wheel:
    $requires.
  platforms:
    - selector:
        matchExpressions:
          - {key: os, operator: In, values: [linux, darwin]}
      uri: https://github.com/etcd-operator/etcd-operator/releases/download/v$version/$archive
      sha256: $archive_sha
      bin: kubectl-etcd
MANIFEST

cp "$src/packaging/image/requirements.lock" "$out/"

# The image: linux/amd64 and linux/arm64 under one OCI index (packaging/image/build-release.sh),
# each platform's SBOM (syft) and the index's provenance attached to it as OCI artifacts, packed
# as an OCI archive.
image="$work/image"
layout_tool=("$python" "$src/packaging/image/oci_layout.py")
PYTHON="$python" DEBS_OUT="$work" SBOM_OUT="$out" SYFT="$syft" \
  "$src/packaging/image/build-release.sh" "$src" "$image" "$commit" >/dev/null 2>"$work/image.log" ||
  { cat "$work/image.log" >&2; exit 1; }
provenance="$out/etcd-operator-$version.provenance.json"
"$python" "$src/packaging/image/provenance.py" "$image" "$commit" "$src/packaging/image/requirements.lock" "$work" \
  >"$provenance"
"${layout_tool[@]}" attach "$image" index application/vnd.in-toto+json "$provenance"
for arch in amd64 arm64; do
  "${layout_tool[@]}" attach "$image" "linux/$arch" application/spdx+json "$out/etcd-operator-$version-linux-$arch.spdx.json"
done
tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner -C "$image" \
  -cf "$out/etcd-operator-$version.oci.tar" .

# The OLM bundle, as `make bundle` writes it from the same tree (manifests/, metadata/).
"$python" "$src/hack/olm_bundle.py" --out "$work/olm-bundle" >"$work/olm-bundle.log" 2>&1 ||
  { cat "$work/olm-bundle.log" >&2; exit 1; }
repack "$out/etcd-operator-olm-bundle-$version.tar.gz" "$work/olm-bundle"

(cd "$out" && sha256sum -- * | LC_ALL=C sort -k2 >"$work/SHA256SUMS" && mv "$work/SHA256SUMS" SHA256SUMS)

# Publishing (RELEASE_REGISTRY), once every file is written: the image index pushed, signed by
# cosign with the release's key, its SBOMs and provenance attached as signed attestations; the
# chart pushed beside it.
if [[ -n "${RELEASE_REGISTRY:-}" ]]; then
  export TUF_ROOT="$work/tuf"  # cosign's trust root cache, never the user's ~/.sigstore
  helm_http=() crane_http=() cosign_http=()
  if [[ "${RELEASE_PLAIN_HTTP:-}" == 1 ]]; then
    helm_http=(--plain-http) crane_http=(--insecure) cosign_http=(--allow-http-registry --allow-insecure-registry)
  fi
  repository="$RELEASE_REGISTRY/etcd-operator"
  sign=(--key "$COSIGN_KEY" --tlog-upload="${COSIGN_TLOG_UPLOAD:-false}" --yes "${cosign_http[@]}")
  publish() {
    local arch index
    index="$repository@$("${layout_tool[@]}" digest "$image" index)" || return 1
    "${layout_tool[@]}" image-only "$image" "$work/push" || return 1
    "$crane" push "${crane_http[@]}" "$work/push" "$repository:$version" --index || return 1
    "$cosign" sign "${sign[@]}" "$index" || return 1
    "$python" -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))["predicate"]))' "$provenance" \
      >"$work/provenance-predicate.json" || return 1
    "$cosign" attest "${sign[@]}" --type slsaprovenance1 --predicate "$work/provenance-predicate.json" "$index" ||
      return 1
    for arch in amd64 arm64; do
      "$cosign" attest "${sign[@]}" --type spdxjson --predicate "$out/etcd-operator-$version-linux-$arch.spdx.json" \
        "$repository@$("${layout_tool[@]}" digest "$image" "linux/$arch")" || return 1
    done
    "$helm" push "${helm_http[@]}" "$out/etcd-operator-$version.tgz" "oci://$RELEASE_REGISTRY/charts"
  }
  publish >"$work/publish.log" 2>&1 || { cat "$work/publish.log" >&2; exit 1; }
  echo "release: pushed and signed $repository:$version and oci://$RELEASE_REGISTRY/charts/etcd-operator:$version" >&2
fi

echo "release: $version from $commit into $out:" >&2
(cd "$out" && ls -l --time-style=+ -- * | awk '{printf "  %-44s %s\n", $NF, $5}') >&2
