"""`python -m etcd_operator.programs.scratch_check`: the verification pod's check container.
Asks the scratch member, over its unix socket on the pod's own emptyDir (no network port),
for its revision, key count and HashKV at the snapshot's revision, compares them with the
source's answers (given in the environment by the builder), writes the verdict's message
to the termination message file and exits with the verdict's code (verdict.CHECK_EXIT_CODES).
Nothing else can reach the restored data: the socket is a file only this pod mounts. The
check authenticates with the pod's throwaway client certificate (programs/scratch_tls.py,
CN root), so a snapshot taken with etcd authentication on is read too, with no secret."""

from __future__ import annotations

import asyncio
import os
import pathlib
import sys
import time
from collections.abc import Mapping

from etcd_operator.clients.etcd.client import ClientTLS, EtcdError, EtcdMemberClient
from etcd_operator.core.backup.scratch_verdict import Expected, Verdict, check_exit_code, compare
from etcd_operator.programs.scratch_tls import read_client_tls

ANSWER_WAIT_SECONDS = 120.0  # from this container's start until the scratch member must answer
RETRY_SECONDS = 0.5


def expected_from(env: Mapping[str, str]) -> Expected:
    def number(name: str) -> int | None:
        text = env.get(name, "")
        return int(text) if text else None

    return Expected(
        int(env["EXPECTED_REVISION"]),
        number("EXPECTED_KEY_COUNT"),
        number("EXPECTED_HASH_KV"),
        number("EXPECTED_COMPACT_REVISION"),
    )


async def ask(endpoint: str, tls: ClientTLS, expected: Expected) -> Verdict:
    deadline = time.monotonic() + ANSWER_WAIT_SECONDS
    last_error = "no answer yet"
    while time.monotonic() < deadline:
        try:
            async with EtcdMemberClient(endpoint, timeout=10, tls=tls) as client:
                revision = (await client.status()).revision
                hash_kv, compact_revision = await client.hash_kv(expected.revision)
                key_count = await client.count_keys(expected.revision)
            return compare(expected, revision, key_count, hash_kv, compact_revision)
        except EtcdError as e:
            last_error = str(e)
        await asyncio.sleep(RETRY_SECONDS)
    return Verdict(
        None,
        "ScratchMemberUnavailable",
        f"the scratch member did not answer within {ANSWER_WAIT_SECONDS:.0f}s: {last_error}",
        complete=False,
    )


async def check(env: Mapping[str, str]) -> Verdict:
    try:
        tls = await asyncio.to_thread(read_client_tls, env["SCRATCH_TLS_DIR"])
    except OSError as e:  # the scratch-tls init container's files; retried as any unanswered check
        return Verdict(None, "ScratchMemberUnavailable", f"no client certificate: {e}", complete=False)
    return await ask(f"unix://{env['ETCD_SOCKET']}", tls, expected_from(env))


def main(env: Mapping[str, str]) -> int:
    verdict = asyncio.run(check(env))
    text = f"{verdict.reason}: {verdict.message}"
    print(text)
    try:
        pathlib.Path(env["VERDICT_FILE"]).write_text(verdict.message[:3000])
    except OSError as e:  # the exit code alone still carries the verdict
        print(f"could not write {env['VERDICT_FILE']}: {e}", file=sys.stderr)
    return check_exit_code(verdict)


if __name__ == "__main__":
    sys.exit(main(dict(os.environ)))
