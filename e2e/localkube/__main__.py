"""Command line: python -m localkube up|down|status|env."""

from __future__ import annotations

import argparse
import sys

from localkube import controlplane, layout, processes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="localkube", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("up", help="start whatever is not running yet, the three real nodes too (harmless when up)")
    down = sub.add_parser("down", help="stop everything and check that no port stays bound")
    down.add_argument("--purge", action="store_true", help="also delete the data and logs")
    sub.add_parser("status", help="show each component")
    sub.add_parser("env", help="print the env file's path")
    args = parser.parse_args(argv)

    where = layout.current()
    if args.command == "up":
        try:
            controlplane.up(where)
        except processes.PortTaken as e:
            print(f"localkube: {e}", file=sys.stderr)
            return 2
        pods = where.node_network.pods_cidr
        print(
            f"localkube is up (apiserver {controlplane.apiserver_url(where)}, "
            f"S3 {controlplane.s3_endpoint(where)}, pods in {pods})",
            file=sys.stderr,
        )
        print(f"export KUBECONFIG={where.kubeconfig}")
        print(f"# S3 endpoint, bucket and credentials: source {where.env_file}")
        return 0
    if args.command == "down":
        problems = []
        # Substrates of their own that tests start under this one (tests/nodes) go too.
        for nested in sorted(where.state_dir.glob("*/.localkube")):
            problems += controlplane.down(layout.current(nested.parent), purge=args.purge)
        problems += controlplane.down(where, purge=args.purge)
        for problem in problems:
            print(f"localkube: {problem}", file=sys.stderr)
        return 1 if problems else 0
    if args.command == "status":
        for name, state in controlplane.status(where).items():
            print(f"{name:26} {state}")
        if controlplane.real_nodes(where):
            from localkube import realnodes

            for name, state in realnodes.status(where).items():
                print(f"{name:26} {state}")
        return 0
    if args.command == "env":
        print(where.env_file)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
