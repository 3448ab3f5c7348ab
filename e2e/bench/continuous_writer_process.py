"""The operator's continuous backup writer (controllers/backup/continuous_writer.SegmentWriter)
in a process of its own, for bench/continuous.py, which reads its CPU time and peak RSS from
/proc. Run by file path with the operator's interpreter (BENCH_OPERATOR_PYTHON), so that it
imports the installed package and nothing of the bench.

Only the Kubernetes side is replaced, and only where the writer reads Kubernetes:
- the members come from the command line instead of the EtcdCluster's pods; the same choice
  (source_candidates.ask_candidates and chosen) picks the one to watch among them;
- spec.storage.s3 names no credentialsSecretRef, so s3_location reads no Secret, and boto3
  takes the store's credentials from the environment (AWS_ACCESS_KEY_ID, ...).

It is started and drained the way the backup controller does (continuous_streams.start, then
drain() on each pass; here every POLL_SECONDS), and prints one JSON line per segment uploaded
(with the wall time it saw it drained) and one each time the writer's `waiting` changes.

`--idle`: the same imports (and boto3, which the first S3Storage imports), then nothing: the
reference for the writer's RSS. Both run until their stdin closes."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from etcd_operator.controllers.backup.continuous_writer import SegmentWriter
from etcd_operator.controllers.backup.source_candidates import ask_candidates, chosen
from etcd_operator.core.backup.continuous import ChainStart, ContinuousSpec
from etcd_operator.core.backup.manifest import Identity
from etcd_operator.core.backup.source_choice import Candidate
from etcd_operator.core.backup.spec import BackupSpec

POLL_SECONDS = 0.1


class MembersGiven(SegmentWriter):
    """The writer, choosing among the members it was given rather than the cluster's pods."""

    def __init__(self, members: dict[str, str], cluster_body: dict[str, Any], **kwargs: Any):
        super().__init__(kube_client=None, **kwargs)  # type: ignore[arg-type]  # it reads no Secret
        self.members = members
        self.cluster_body = cluster_body

    async def _member(self):
        candidates = [Candidate(name, endpoint) for name, endpoint in self.members.items()]
        member = chosen(candidates, await ask_candidates(candidates, None), self.cluster_body)
        return member.endpoint, None


def _say(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


async def _stdin_closed() -> None:
    await asyncio.to_thread(sys.stdin.read)


async def run_writer(config: dict[str, Any]) -> None:
    spec = {
        "clusterRef": {"name": config["cluster"]},
        "storage": {"s3": config["s3"]},
        "continuous": {"enabled": True, **config["continuous"]},
    }
    writer = MembersGiven(
        config["members"],
        {
            "metadata": {"namespace": config["namespace"], "name": config["cluster"]},
            "status": {"clusterID": config["chain_start"]["cluster_id"]},
        },
        identity=Identity(**config["identity"]),
        spec=BackupSpec.from_dict(spec),
        continuous=ContinuousSpec.from_dict(spec),
        start=ChainStart(**config["chain_start"]),
    )
    writer.start()
    closed = asyncio.create_task(_stdin_closed())
    waiting: str | None = "starting"
    while not closed.done():
        for manifest in writer.drain():
            _say(drained_at=time.time(), sequence=manifest.sequence, last_revision=manifest.last_revision)
        view = writer.view()
        if view.waiting != waiting:
            waiting = view.waiting
            _say(waiting=waiting, at=time.time())
        if writer.ended:
            _say(ended=writer.stopped_because or (writer.broken and writer.broken.message))
            break
        await asyncio.sleep(POLL_SECONDS)
    await writer.stop()


def main(argv: list[str]) -> int:
    if argv[1:] == ["--idle"]:
        import boto3  # noqa: F401  # what the writer's first S3Storage imports

        _say(ready=True)
        sys.stdin.read()
        return 0
    asyncio.run(run_writer(json.loads(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
