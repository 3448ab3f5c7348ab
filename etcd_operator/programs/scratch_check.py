"""`python -m etcd_operator.programs.scratch_check`: the verification pod's check container.
Asks the scratch member, over its unix socket on the pod's own emptyDir (no network port),
for its revision, key count and HashKV at the snapshot's revision, compares them with the
source's answers (given in the environment by the builder), writes the verdict's message
to the termination message file and exits with the verdict's code (verdict.CHECK_EXIT_CODES).
Nothing else can reach the restored data: the socket is a file only this pod mounts."""

from __future__ import annotations

import asyncio
import os
import pathlib
import sys
import time
from collections.abc import Mapping

from etcd_operator.clients.etcd.client import EtcdError, EtcdMemberClient
from etcd_operator.core.backup.scratch_verdict import Expected, Verdict, check_exit_code, compare

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


async def ask(endpoint: str, expected: Expected) -> Verdict:
    deadline = time.monotonic() + ANSWER_WAIT_SECONDS
    last_error = "no answer yet"
    while time.monotonic() < deadline:
        try:
            async with EtcdMemberClient(endpoint, timeout=10) as client:
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


def main(env: Mapping[str, str]) -> int:
    verdict = asyncio.run(ask(f"unix://{env['ETCD_SOCKET']}", expected_from(env)))
    text = f"{verdict.reason}: {verdict.message}"
    print(text)
    try:
        pathlib.Path(env["VERDICT_FILE"]).write_text(verdict.message[:3000])
    except OSError as e:  # the exit code alone still carries the verdict
        print(f"could not write {env['VERDICT_FILE']}: {e}", file=sys.stderr)
    return check_exit_code(verdict)


if __name__ == "__main__":
    sys.exit(main(dict(os.environ)))
