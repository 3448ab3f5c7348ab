"""Command line (PYTHONPATH=e2e):

  python -m images build [NAME...]                 build what is not cached; print "name archive"
  python -m images import --address SOCK [NAME...]  build, then import into that containerd (k8s.io)
  python -m images names                           the image names, one a line

NAME filters by substring (`pause`, `etcd:v3.6`); without one, every image. An image whose
inputs are missing is reported and skipped; the exit code is then 1.
"""

from __future__ import annotations

import argparse
import sys
import time

from images import containerd, recipes


def selected(filters: list[str]) -> list[recipes.Recipe]:
    chosen = [recipe for recipe in recipes.all_recipes() if not filters or any(text in recipe.name for text in filters)]
    if not chosen:
        raise recipes.Missing(f"no image matches {' '.join(filters)}")
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="images", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build the archives (cached), print where they are")
    build.add_argument("names", nargs="*")
    load = sub.add_parser("import", help="build, then import into a containerd")
    load.add_argument("--address", required=True, help="the containerd socket")
    load.add_argument("names", nargs="*")
    sub.add_parser("names", help="print the image names")
    args = parser.parse_args(argv)

    if args.command == "names":
        for recipe in recipes.all_recipes():
            print(recipe.name)
        return 0
    try:
        chosen = selected(args.names)
    except recipes.Missing as e:
        print(f"images: {e}", file=sys.stderr)
        return 1
    failed = 0
    for recipe in chosen:
        started = time.monotonic()
        try:
            archive = recipes.build(recipe)
            if args.command == "build":
                print(f"{recipe.name} {archive}")
                continue
            containerd.import_archive(args.address, archive, recipe.base_name)
            if recipe.name not in containerd.image_names(args.address):
                raise containerd.ContainerdError(f"{archive} did not import as {recipe.name}")
            print(f"images: imported {recipe.name} in {time.monotonic() - started:.1f}s", file=sys.stderr)
        except (recipes.Missing, containerd.ContainerdError) as e:
            print(f"images: {recipe.name}: {e}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
