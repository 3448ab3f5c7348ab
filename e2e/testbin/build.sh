#!/usr/bin/env bash
# Builds the pinned local-substrate binaries from their Go modules and caches them
# outside git. Each recipe is a folder here with a go.mod pinning the module and a
# `binaries` table (name | package | ldflags); a recipe is rebuilt only when its go.mod,
# go.sum, table or own program (porcupine/main.go) changes. One line per binary is
# printed; Go's own output goes to a log.
#
#   testbin/build.sh                 build what is missing, print where the binaries are
#   testbin/build.sh RECIPE ...      only these recipes (`make demo` builds what it runs)
#   testbin/build.sh --dir           print the cache directory only
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${ETCD_OPERATOR_TESTBIN:-${XDG_CACHE_HOME:-$HOME/.cache}/etcd-operator/testbin}"

if [[ "${1:-}" == "--dir" ]]; then
  echo "$cache"
  exit 0
fi

recipes() {
  local dir
  for dir in "$here"/*/; do
    [[ -f "$dir/go.mod" && -f "$dir/binaries" ]] && basename "$dir"
  done
}

selected=("$@")
for recipe in "${selected[@]}"; do
  [[ -f "$here/$recipe/go.mod" && -f "$here/$recipe/binaries" ]] ||
    { echo "testbin: no recipe $recipe (recipes: $(recipes | tr '\n' ' '))" >&2; exit 1; }
done
[[ ${#selected[@]} -gt 0 ]] || mapfile -t selected < <(recipes)

module_version() {  # the version go.mod requires of a module
  awk -v m="$2" '($1 == "require" && $2 == m) {print $3} ($1 == m) {print $2}' "$here/$1/go.mod" | head -1
}

# Expands {version:<module>} and {minor:<module>} in a ldflags template.
expand_ldflags() {
  local recipe="$1" flags="$2" module version
  while [[ "$flags" =~ \{(version|minor):([^}]+)\} ]]; do
    module="${BASH_REMATCH[2]}"
    version="$(module_version "$recipe" "$module")"
    if [[ "${BASH_REMATCH[1]}" == minor ]]; then version="$(echo "$version" | cut -d. -f2)"; fi
    flags="${flags//"${BASH_REMATCH[0]}"/$version}"
  done
  echo "$flags"
}

# recipe|name|package|ldflags, one line per binary
table() {
  local recipe="$1" name pkg ldflags
  while IFS='|' read -r name pkg ldflags; do
    [[ -z "$name" || "$name" == \#* ]] && continue
    echo "$recipe|$name|$pkg|$(expand_ldflags "$recipe" "$ldflags")"
  done <"$here/$recipe/binaries"
}

# A recipe's own program (Go files beside go.mod other than tools.go) is part of its stamp;
# recipes that only pin modules keep the stamp they always had.
recipe_stamp() {
  local recipe="$1" sources
  sources="$(find "$here/$recipe" -maxdepth 1 -name '*.go' ! -name tools.go | sort)"
  {
    cat "$here/$recipe/go.mod" "$here/$recipe/go.sum"
    echo "$(table "$recipe")"
    go env GOVERSION
    if [[ -n "$sources" ]]; then cat $sources; fi
  } | sha256sum | cut -c1-12
}

mkdir -p "$cache/logs"
started=$SECONDS
built=0

# While one recipe compiles (CPU), the modules of the recipes after it download (network):
# `go list -deps` fetches what their packages import and compiles nothing. Best effort; a
# failure shows in the build itself.
declare -A out_of  # recipe -> its cache directory, named by its stamp
missing=()
for recipe in "${selected[@]}"; do
  out_of[$recipe]="$cache/$recipe-$(recipe_stamp "$recipe")"
  [[ -f "${out_of[$recipe]}/.complete" ]] || missing+=("$recipe")
done
if [[ ${#missing[@]} -gt 1 ]]; then
  (
    for recipe in "${missing[@]:1}"; do
      (cd "$here/$recipe" && CGO_ENABLED=0 GOFLAGS=-mod=mod \
        go list -deps -f '' $(table "$recipe" | cut -d'|' -f3 | sort -u)) >"$cache/logs/$recipe.prefetch.log" 2>&1 || true
    done
  ) &
  prefetch=$!
  # Under errexit a failing command in the trap sets the script's status: a prefetch that
  # already finished (nothing for pkill to find) made a successful build exit 1.
  trap 'pkill -P "$prefetch" 2>/dev/null || true; kill "$prefetch" 2>/dev/null || true' EXIT
fi
for recipe in "${selected[@]}"; do
  out="${out_of[$recipe]}"
  if [[ ! -f "$out/.complete" ]]; then
    rm -rf "$out" && mkdir -p "$out"
    log="$cache/logs/$recipe.log"
    : >"$log"
    while IFS='|' read -r _ name pkg ldflags; do
      t0=$SECONDS
      printf 'testbin: building %-28s' "$recipe/$name" >&2
      if ! (cd "$here/$recipe" && CGO_ENABLED=0 GOFLAGS=-mod=mod \
            go build -trimpath -ldflags "$ldflags" -o "$out/$name" "$pkg") >>"$log" 2>&1; then
        echo " FAILED after $((SECONDS - t0))s; Go's output: $log" >&2
        tail -n 20 "$log" >&2
        exit 1
      fi
      echo " $((SECONDS - t0))s" >&2
      built=$((built + 1))
    done < <(table "$recipe")
    touch "$out/.complete"
  fi
  ln -sfn "$(basename "$out")" "$cache/$recipe"
done

if [[ $built -gt 0 ]]; then
  echo "testbin: built $built binaries in $((SECONDS - started))s into $cache (logs in $cache/logs/)" >&2
else
  echo "testbin: up to date in $cache (${selected[*]})" >&2
fi
echo "$cache"
