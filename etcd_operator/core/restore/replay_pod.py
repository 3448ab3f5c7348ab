"""The one-shot pod that replays a point-in-time restore's segments. Pure.

Like the backup verification pod (core/backup/scratch_pod.py): the base snapshot is fetched
onto an emptyDir (its sha256 checked again) and restored there with the target's etcdutl,
never bumped (the replayed revisions must line up with the source's). The last init
container, `apply` (programs/replay.py), checks every segment against its manifest and
replays them into that backend with etcd's own storage code, before any etcd serves it.
Then a scratch single-member etcd runs on it, listening only on unix sockets inside that
emptyDir (no TCP port: nothing outside the pod reaches the data; the replay
authenticates with a certificate of a CA made inside the pod, as etcd's root user when the
base snapshot has authentication on: core/scratch_tls.py) and without fsync
(`--unsafe-no-fsync`: the store lives only as long as the pod, and only its snapshot,
uploaded and checked, is kept). Beside it, the replay container checks that it serves the
replayed revision and uploads its snapshot, sealed as the operator chose
(core/restore/replay_sealing.py: compression and key ID in its environment). The exit code
and termination message of `apply` (when it refused) or of the replay container are the
result. The operator removes the pod once it has read them.

The restore's keys Secret, when there is one, is mounted into the containers that read or
write sealed objects (the fetch, the apply and the replay), never into etcd's or etcdutl's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from etcd_operator import API_GROUP
from etcd_operator.core import seed_containers
from etcd_operator.core.backup.segments import SEGMENTS_DIR
from etcd_operator.core.restore.point_in_time import ReplayRecord
from etcd_operator.core.restore.replay_sealing import DEFAULT_SEALING, ReplayedSealing

LABEL_REPLAY = f"{API_GROUP}/replay-for-restore"
SCRATCH = "/var/lib/etcd-replay"
BASE_FILE = f"{SCRATCH}/base.db"
DATA_DIR = f"{SCRATCH}/data"
WORK_DIR = f"{SCRATCH}/work"  # the segments and the replayed snapshot, on their way
RESULT_FILE = f"{SCRATCH}/result"
MEMBER = "replay"
REPLAY_CONTAINER = "replay"
APPLY_CONTAINER = "apply"  # replays the segments into the restored backend, before etcd serves it
BACKEND_DB = f"{DATA_DIR}/member/snap/db"  # where etcdutl restores a member's backend
CLIENT_SOCKET = f"{SCRATCH}/{seed_containers.SCRATCH_CLIENT_SOCKET}"
TLS_DIR = seed_containers.scratch_tls_dir(SCRATCH)  # the throwaway CA's certificates (core/scratch_tls.py)
PLACEHOLDER_PEER_URL = seed_containers.PLACEHOLDER_PEER_URL
QUOTA_BACKEND_BYTES = 8 << 30  # etcd's suggested maximum; the source's own quota held the data
# The scratch member serving the replayed backend: no fsync (its data is thrown away, only its
# snapshot is kept), and room for what the source held.
REPLAY_MEMBER_FLAGS = ("--unsafe-no-fsync", f"--quota-backend-bytes={QUOTA_BACKEND_BYTES}")
# fetch_env's variables the replay container does not use (they name the base snapshot's fetch)
_FETCH_ONLY = ("S3_KEY", "EXPECTED_SHA256", "SNAPSHOT_FILE", "DATA_DIR")


def pod_name(restore: str) -> str:
    """Within a DNS label for a maximal restore name (58)."""
    return f"{restore}-pitr"


def segments_folder(backup_folder: str, chain: str) -> str:
    return f"{backup_folder}{SEGMENTS_DIR}/{chain}/"


def replay_pod(
    restore: str,
    namespace: str,
    etcd_image: str,
    operator_image: str,
    source: Mapping[str, Any],
    backup_folder: str,
    record: ReplayRecord,
    until_time: float | None,
    pull_secrets: list[dict[str, str]] | None = None,
    keys_secret: str | None = None,
    sealing: ReplayedSealing = DEFAULT_SEALING,
) -> dict[str, Any]:
    """`source`: the backup's storage.s3 block; `record`: the plan recorded in status;
    `keys_secret`: the Secret whose keys decrypt the inputs (and encrypt the output)."""
    scratch = [{"name": "scratch", "mountPath": SCRATCH}]
    volumes: list[dict[str, Any]] = [{"name": "scratch", "emptyDir": {}}]
    ca_volumes, ca_mounts = seed_containers.ca_bundle(source)
    keys_volumes, keys_mounts = seed_containers.keys_bundle(keys_secret)
    volumes += ca_volumes + keys_volumes
    storage_env = [
        e
        for e in seed_containers.fetch_env(
            source, record.base_key, record.base_sha256, BASE_FILE, DATA_DIR, home=SCRATCH, keys=bool(keys_secret)
        )
        if e["name"] not in _FETCH_ONLY
    ]
    replay_env = {
        "ETCD_SOCKET": CLIENT_SOCKET,
        "SCRATCH_TLS_DIR": TLS_DIR,
        "RESULT_FILE": RESULT_FILE,
        "WORK_DIR": WORK_DIR,
        "BASE_KEY": record.base_key,
        "BASE_REVISION": str(record.base_revision),
        "SEGMENTS_FOLDER": segments_folder(backup_folder, record.chain),
        "CHAIN": record.chain,
        "FIRST_SEQUENCE": str(record.first_sequence),
        "LAST_SEQUENCE": str(record.last_sequence),
        "UP_TO_REVISION": str(record.up_to_revision),
        "UNTIL_TIME": "" if until_time is None else repr(until_time),
        "OUTPUT_KEY": record.replayed_key,
        "RESTORE": restore,
        "REPLAYED_COMPRESSION": sealing.compression,
        "REPLAYED_KEY_ID": sealing.key_id,  # the ID only: the key comes from the mounted Secret
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod_name(restore), "namespace": namespace, "labels": {LABEL_REPLAY: restore}},
        "spec": seed_containers.one_shot_pod_spec(
            volumes,
            init_containers=[
                seed_containers.fetch_container(
                    operator_image,
                    source,
                    record.base_key,
                    record.base_sha256,
                    BASE_FILE,
                    DATA_DIR,
                    SCRATCH,
                    scratch + ca_mounts + keys_mounts,
                    keys_secret=keys_secret,
                ),
                seed_containers.etcdutl_restore(
                    etcd_image,
                    BASE_FILE,
                    MEMBER,
                    DATA_DIR,
                    f"{MEMBER}={PLACEHOLDER_PEER_URL}",
                    PLACEHOLDER_PEER_URL,
                    f"replay-{restore}",
                    scratch,
                    # never bumped here: replayed revisions must line up with the source's; the
                    # members restored from the replayed snapshot are bumped (spec.revisionBump)
                    revision_bump=0,
                ),
                seed_containers.scratch_tls_container(operator_image, SCRATCH, scratch),
                {
                    "name": APPLY_CONTAINER,
                    "image": operator_image,
                    "command": ["python", "-m", "etcd_operator.programs.replay", "apply"],
                    "env": storage_env
                    + [{"name": k, "value": v} for k, v in replay_env.items()]
                    + [{"name": "BACKEND_DB", "value": BACKEND_DB}],
                    "terminationMessagePath": RESULT_FILE,
                    "volumeMounts": scratch + ca_mounts + keys_mounts,
                },
            ],
            containers=[
                seed_containers.scratch_member(etcd_image, SCRATCH, MEMBER, DATA_DIR, scratch, *REPLAY_MEMBER_FLAGS),
                {
                    "name": REPLAY_CONTAINER,
                    "image": operator_image,
                    "command": ["python", "-m", "etcd_operator.programs.replay"],
                    "env": storage_env + [{"name": k, "value": v} for k, v in replay_env.items()],
                    "terminationMessagePath": RESULT_FILE,
                    "volumeMounts": scratch + ca_mounts + keys_mounts,
                },
            ],
            pull_secrets=pull_secrets or [],
        ),
    }
