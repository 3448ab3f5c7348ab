"""Host processes that resolve names with the real nodes' DNS, whichever checkout owns the
host's /etc/resolv.conf: each runs in a mount namespace of its own, with a resolv.conf naming
that DNS bound over /etc/resolv.conf. Members' names then resolve as they do in pods."""

from __future__ import annotations

import pathlib


def command(resolv_conf: pathlib.Path, resolver: str, argv: list[str]) -> list[str]:
    """`argv` run on the resolver at `resolver`; `resolv_conf` is written for it. unshare execs
    sh, which execs `argv`: the process started with this command is `argv`'s."""
    resolv_conf.write_text(f"nameserver {resolver}\nsearch cluster.local\noptions ndots:5\n")
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        'mount --bind "$0" /etc/resolv.conf && exec "$@"',
        str(resolv_conf),
        *argv,
    ]
