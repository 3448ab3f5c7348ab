"""What an EtcdBackup's run and verification would do in the simulated world at this moment:
the member a snapshot is taken from (the REAL backup.source_choice, given what each member pod
answers to a Status call, as backup/source_candidates.py gathers it), and the verification pod the REAL
builder (backup.scratch_pod) returns. Both are looked up on their modules so that mutants
can patch them."""

from __future__ import annotations

import random
import shlex

from etcd_operator.controllers.backup import source_candidates as backup_source
from etcd_operator.core.backup import scratch_pod as verification_pod
from etcd_operator.core.backup import source_choice
from etcd_operator.core.backup.scratch_verdict import Expected
from etcd_operator.core.cluster.identity import parse_hex_id
from tests.sim.view import status_at
from tests.sim.world import NAMESPACE, Foreign, World


def snapshot_source(world: World, cluster_status: dict):
    """(the choice, {pod name: what truly answered on its address}) for a run starting now."""
    pod_ips = {p.name: p.ip for p in world.pods.values() if not p.deleting}
    candidates = backup_source.rank_candidates(cluster_status.get("members") or [], pod_ips)
    serving = {p.ip: p for p in world.pods.values() if p.ip and world.member_up(p)}
    answers, behind = {}, {}
    for candidate in candidates:
        result, where = status_at(world, candidate.endpoint.rsplit(":", 1)[0], serving)
        if isinstance(result, str):
            answers[candidate.name] = source_choice.Answer(error=result)
            continue
        answers[candidate.name] = source_choice.Answer(
            result.cluster_id, result.member_id, result.leader_id, result.is_learner
        )
        behind[candidate.name] = where
    choice = source_choice.choose_source(candidates, answers, parse_hex_id(cluster_status.get("clusterID")))
    return choice, behind


def snapshot_truth(world: World, choice, behind: dict) -> str | None:
    """Why a snapshot from the chosen member would not be of the cluster's current data, or None."""
    if not isinstance(choice, source_choice.SourceMember):
        return None
    where = behind.get(choice.name)
    if isinstance(where, Foreign):
        return f"{choice.name}'s address is served by another cluster's etcd ({where.cluster_id:x})"
    main = world.main
    _, data, group = where
    if main is None or group.lineage != main.lineage:
        return (
            f"{choice.name} serves dataset {group.lineage} (cluster {group.cluster_id:x}), not the cluster's "
            f"current one ({'none' if main is None else f'{main.lineage}, cluster {main.cluster_id:x}'})"
        )
    return None


def some_verification_pod(rng: random.Random) -> dict:
    """The verification pod the real builder returns for a backup drawn at random."""
    backup = "b" * rng.randint(1, 63)
    source = {"bucket": "backups", "prefix": rng.choice(("", "nightly/"))}
    if rng.random() < 0.5:
        source["caBundle"] = {"secretRef": {"name": "ca", "key": "ca.crt"}}
    expected = Expected(rng.randint(1, 10**6), rng.choice((None, 42)), rng.choice((None, 7)), rng.choice((None, 3)))
    return verification_pod.verification_pod(
        backup, NAMESPACE, "uid-b", "etcd:v3.6.16", "operator:1", source, f"{backup}/snap.db", "ab" * 32, expected
    )


LISTEN_FLAGS = (
    "--listen-client-urls",
    "--listen-peer-urls",
    "--listen-metrics-urls",
    "--advertise-client-urls",
    "--listen-client-http-urls",
)
REQUIRED_FLAGS = ("--listen-client-urls", "--listen-peer-urls")  # etcd's defaults are TCP ports


def exposure(pod: dict) -> list[str]:
    """How the pod would serve data to anything outside itself: a port, the host's network, or
    an etcd listening on anything but a unix socket (or on etcd's TCP defaults)."""
    spec = pod["spec"]
    found = []
    if spec.get("hostNetwork"):
        found.append("hostNetwork")
    for container in spec.get("initContainers", []) + spec.get("containers", []):
        name = container["name"]
        for port in container.get("ports") or []:
            found.append(f"{name} declares port {port}")
        words = list(container.get("command") or []) + list(container.get("args") or [])
        if not words or words[0] != "etcd":
            continue
        flags = dict(w.split("=", 1) for w in words if w.startswith("--") and "=" in w)
        for flag in REQUIRED_FLAGS:
            if flag not in flags:
                found.append(f"{name} has no {flag} (etcd then listens on TCP)")
        for flag in LISTEN_FLAGS:
            for url in filter(None, flags.get(flag, "").split(",")):
                if not url.startswith(("unix://", "unixs://")):  # unixs: TLS on a unix socket
                    found.append(f"{name} {flag}={shlex.quote(url)}")
    return found
