"""`python -m etcd_operator.programs.peer_name`: the init container of a TLS member pod. Waits until the
member's peer name (PEER_NAME) resolves to its own address (POD_IP), then until each name of
OTHER_PEER_NAMES resolves, for at most PEER_NAME_WAIT_SECONDS in all, then exits 0 either way.

Why: a member checks a peer's client certificate by resolving the certificate's DNS names and
comparing them with the peer's address. A member that starts before its own record exists
under the headless peer Service is refused by the members it joins, cannot fetch the cluster
and exits; the kubelet restarts it. Past the bound etcd starts anyway: the wait only spares
that restart, and a DNS outage must not keep a member down that could otherwise start (etcd
then reports the refusal itself, as it would without the wait). Standard library only.

Only the name is asked, not the PTR record of the address that etcd reads for the
certificate's wildcard names: the cluster DNS serves both from the same endpoint, and a PTR
query before the record exists could leave a negative answer in a DNS cache that the members
it joins then read."""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
import time
from collections.abc import Callable, Mapping

DEFAULT_WAIT_SECONDS = 60.0
INTERVAL_SECONDS = 0.1  # a name resolves within about a second of its pod getting an address


def addresses(name: str) -> set[str]:
    """What the pod's resolver answers for `name` (raises OSError when it does not)."""
    return {str(info[4][0]) for info in socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)}


def same_address(a: str, b: str) -> bool:
    try:
        return ipaddress.ip_address(a) == ipaddress.ip_address(b)
    except ValueError:
        return a == b


def wait(
    name: str,
    ip: str | None,
    seconds: float,
    resolve: Callable[[str], set[str]] = addresses,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[bool, str]:
    """(resolved to `ip` in time, or to any address when `ip` is None; the last answer)."""
    deadline = clock() + seconds
    while True:
        try:
            found = resolve(name)
            last = ", ".join(sorted(found)) or "no address"
        except OSError as e:
            found, last = set(), str(e) or type(e).__name__
        if any(ip is None or same_address(address, ip) for address in found):
            return True, last
        if clock() >= deadline:
            return False, last
        sleep(INTERVAL_SECONDS)


def main(environment: Mapping[str, str] | None = None) -> int:
    env = os.environ if environment is None else environment
    name, ip = env["PEER_NAME"], env["POD_IP"]
    seconds = float(env.get("PEER_NAME_WAIT_SECONDS") or DEFAULT_WAIT_SECONDS)
    others = [n for n in (env.get("OTHER_PEER_NAMES") or "").split(",") if n]
    started = time.monotonic()
    resolved, last = wait(name, ip, seconds)
    took = time.monotonic() - started
    if not resolved:
        print(
            f"{name} did not resolve to {ip} within {seconds:.0f}s (last answer: {last}); starting etcd "
            "anyway: the members it joins refuse its peer certificate until it does",
            file=sys.stderr,
            flush=True,
        )
        return 0
    print(f"{name} resolves to {ip} after {took:.1f}s", flush=True)
    for other in others:
        resolved, last = wait(other, None, max(0.0, seconds - (time.monotonic() - started)))
        if not resolved:
            print(f"{other} did not resolve (last answer: {last}); starting etcd anyway", file=sys.stderr, flush=True)
            return 0
    if others:
        print(f"the other members' names resolve after {time.monotonic() - started:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
