"""`kubectl etcd` (the console script kubectl-etcd): day-2 commands for etcd clusters run by
the operator. Every change goes through the operator's own resources and annotations, but
for what the user asks etcdctl to do in `kubectl etcd etcdctl` (etcdctl.py)."""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import pathlib
import secrets
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from etcd_operator_kubectl import benchmark, report, views

Command = Callable[[argparse.Namespace, Any, str], Awaitable[int]]


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def request_token() -> str:
    """A value not used before for a request annotation (defragment, rotate), so it reads as a new request."""
    return f"{now():%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def emit(args: argparse.Namespace, data: Any, text: str) -> None:
    if args.output == "json":
        print(json.dumps(data, indent=2, sort_keys=True))
    elif args.output == "yaml":
        import yaml

        print(yaml.safe_dump(data, sort_keys=True), end="")
    else:
        print(text)


def confirm(args: argparse.Namespace, question: str) -> bool:
    if args.yes:
        return True
    if not sys.stdin.isatty():
        print("Not confirmed: stdin is not a terminal; pass --yes to proceed.", file=sys.stderr)
        return False
    try:
        return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")
    except EOFError:
        return False


async def cmd_status(args, kube, namespace) -> int:
    view = views.status_view(await kube.get(namespace, "etcdclusters", args.cluster))
    emit(args, view, views.status_table(view))
    return 0


async def cmd_backups(args, kube, namespace) -> int:
    view = views.backups_view(await kube.get(namespace, "etcdbackups", args.backup))
    emit(args, view, views.backups_table(view, now()))
    return 0


async def cmd_restore(args, kube, namespace) -> int:
    backup = await kube.get(namespace, "etcdbackups", args.backup)
    choice = views.choose(backup, args.key, args.revision, args.time, args.latest)
    new_spec = None
    if args.new_cluster:
        new_spec = await _source_spec(kube, namespace, backup["spec"]["clusterRef"]["name"])
        if args.size:
            new_spec["size"] = args.size
    name = args.name or f"{args.in_place or args.new_cluster}-from-{choice.slug}"
    restore = views.restore_object(namespace, name, args.backup, choice, args.in_place, args.new_cluster, new_spec)
    print(views.restore_plan(restore, choice, now()), file=sys.stderr)
    if not confirm(args, "Create this EtcdRestore?"):
        return 1
    created = await kube.create(namespace, "etcdrestores", restore)
    emit(
        args,
        created,
        f"etcdrestore.etcd.operator.dev/{name} created; follow it with "
        f"`kubectl get etcdrestore {name} -n {namespace} -w`",
    )
    return 0


async def _source_spec(kube, namespace: str, cluster: str) -> dict[str, Any]:
    """The new cluster starts with the backed-up cluster's spec when that cluster still exists."""
    from kubernetes_asyncio.client import ApiException

    try:
        spec = dict((await kube.get(namespace, "etcdclusters", cluster)).get("spec") or {})
    except ApiException as e:
        if e.status != 404:
            raise
        return {"size": 3}
    return spec


async def cmd_approve_recovery(args, kube, namespace) -> int:
    cluster = await kube.get(namespace, "etcdclusters", args.cluster)
    conditions = (cluster.get("status") or {}).get("conditions") or []
    print(
        f"EtcdCluster {namespace}/{args.cluster}: approving quorum recovery lets the operator restart the "
        "most advanced surviving member as a new single-member cluster (force-new-cluster); the other "
        "members' PVCs are kept aside. One approval covers one incident.",
        file=sys.stderr,
    )
    for c in conditions:
        if c.get("status") != "True" or c.get("type") in ("Degraded", "QuorumLost"):
            print(f"  {c.get('type')}={c.get('status')} {c.get('reason', '')}: {c.get('message', '')}", file=sys.stderr)
    if not confirm(args, "Approve quorum recovery?"):
        return 1
    patched = await kube.annotate(namespace, "etcdclusters", args.cluster, {views.APPROVE_RECOVERY_ANNOTATION: "true"})
    emit(
        args,
        patched["metadata"]["annotations"],
        f"etcdcluster.etcd.operator.dev/{args.cluster} quorum recovery approved",
    )
    return 0


async def cmd_defrag(args, kube, namespace) -> int:
    token = request_token()
    patched = await kube.annotate(namespace, "etcdclusters", args.cluster, {views.DEFRAGMENT_ANNOTATION: token})
    emit(
        args,
        patched["metadata"]["annotations"],
        f"etcdcluster.etcd.operator.dev/{args.cluster} defragmentation requested (token {token})",
    )
    return 0


async def first_answer(
    read: Callable[[], Awaitable[Any]], answer: Callable[[Any], Any], timeout: float, interval: float = 0.5
) -> Any:
    """`answer` of the object `read` returns, read again every `interval` until it is not None;
    None once `timeout` seconds have passed (--wait of move-leader and benchmark)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while (found := answer(await read())) is None:
        if asyncio.get_running_loop().time() >= deadline:
            return None
        await asyncio.sleep(interval)
    return found


async def cmd_move_leader(args, kube, namespace) -> int:
    cluster = await kube.get(namespace, "etcdclusters", args.cluster)
    target = args.to or views.most_advanced_follower(cluster)
    if target is None:
        print(
            f"EtcdCluster {namespace}/{args.cluster}: status lists no healthy follower to lead; name one with --to",
            file=sys.stderr,
        )
        return 1
    request = views.leader_move_request(request_token(), target)
    patched = await kube.annotate(namespace, "etcdclusters", args.cluster, {views.MOVE_LEADER_ANNOTATION: request})
    if not args.wait:
        emit(
            args,
            patched["metadata"]["annotations"],
            f"etcdcluster.etcd.operator.dev/{args.cluster} leader move to {target} requested ({request}); "
            "status.leaderMove says how it ended",
        )
        return 0
    outcome = await first_answer(
        lambda: kube.get(namespace, "etcdclusters", args.cluster),
        lambda cluster: views.leader_move_outcome(cluster, request),
        args.timeout,
    )
    if outcome is None:
        print(f"no outcome of {request!r} in status.leaderMove after {args.timeout:.0f}s", file=sys.stderr)
        return 1
    emit(args, {"request": request, "outcome": outcome}, f"etcdcluster.etcd.operator.dev/{args.cluster}: {outcome}")
    return 1 if outcome.startswith("refused") else 0


async def cmd_snapshot(args, kube, namespace) -> int:
    template = await kube.get(namespace, "etcdbackups", args.storage_from)
    name = args.name or f"{args.cluster}-snapshot-{now():%Y%m%d%H%M%S}"
    body = {
        "apiVersion": "etcd.operator.dev/v1alpha1",
        "kind": "EtcdBackup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterRef": {"name": args.cluster}, "storage": template["spec"]["storage"]},
    }
    created = await kube.create(namespace, "etcdbackups", body)
    emit(
        args,
        created,
        f"etcdbackup.etcd.operator.dev/{name} created (one-shot); list it with "
        f"`kubectl etcd backups {name} -n {namespace}`",
    )
    return 0


async def cmd_hibernate(args, kube, namespace) -> int:
    print(
        f"EtcdCluster {namespace}/{args.cluster}: hibernation snapshots the cluster with its scheduled and "
        "continuous EtcdBackups, then stops every member; PVCs, Services and certificates stay. "
        "The cluster serves nothing until `kubectl etcd wake`.",
        file=sys.stderr,
    )
    if not confirm(args, "Hibernate?"):
        return 1
    return await _set_hibernation(args, kube, namespace, True)


async def cmd_wake(args, kube, namespace) -> int:
    return await _set_hibernation(args, kube, namespace, False)


async def _set_hibernation(args, kube, namespace: str, enabled: bool) -> int:
    patched = await kube.patch(namespace, "etcdclusters", args.cluster, views.hibernation_patch(enabled))
    what = "hibernation requested" if enabled else "wake requested"
    emit(
        args,
        (patched.get("spec") or {}).get("hibernation"),
        f"etcdcluster.etcd.operator.dev/{args.cluster} {what}; the PHASE column of "
        f"`kubectl get etcdcluster {args.cluster} -n {namespace} -w` follows it",
    )
    return 0


async def cmd_rotate_certificates(args, kube, namespace) -> int:
    if args.ca:
        print(
            f"EtcdCluster {namespace}/{args.cluster}: a CA rotation trusts a new CA, reissues every certificate, "
            "then drops the old CA; members restart one at a time, twice. Clients must trust the new CA "
            "(the cluster's CA Secret) before the old one is dropped.",
            file=sys.stderr,
        )
        if not confirm(args, "Rotate the CA?"):
            return 1
    token = request_token()
    annotation = views.rotation_annotation(args.ca)
    patched = await kube.annotate(namespace, "etcdclusters", args.cluster, {annotation: token})
    what = "CA rotation" if args.ca else "certificate renewal"
    emit(
        args,
        patched["metadata"]["annotations"],
        f"etcdcluster.etcd.operator.dev/{args.cluster} {what} requested ({annotation}={token})",
    )
    return 0


async def cmd_logs(args, kube, namespace) -> int:
    logs = await kube.pod_logs(args.operator_namespace, OPERATOR_SELECTOR, args.tail)
    if not logs:
        raise LookupError(f"no operator pod ({OPERATOR_SELECTOR}) in namespace {args.operator_namespace}")
    for pod, text in sorted(logs.items()):
        for line in views.lines_about(text, namespace, args.cluster):
            print(f"[pod/{pod}] {line}")
    return 0


async def cmd_report(args, kube, namespace) -> int:
    cluster = await kube.get(namespace, "etcdclusters", args.cluster)
    backups, restores = report.belongs_to(
        args.cluster,
        await kube.list_objects(namespace, "etcdbackups"),
        await kube.list_objects(namespace, "etcdrestores"),
    )
    kinds = [("EtcdCluster", cluster)] + [("EtcdBackup", b) for b in backups] + [("EtcdRestore", r) for r in restores]
    taken = now()
    folder = f"etcd-report-{namespace}-{args.cluster}-{taken:%Y%m%dT%H%M%SZ}"
    files: dict[str, Any] = {f"{folder}/{kind.lower()}-{o['metadata']['name']}.yaml": o for kind, o in kinds}
    wanted = {(kind, o["metadata"]["name"]) for kind, o in kinds}
    files[f"{folder}/events.yaml"] = report.about(await kube.events(namespace), wanted)
    for pod, text in (await kube.pod_logs(args.operator_namespace, OPERATOR_SELECTOR, None)).items():
        files[f"{folder}/operator-logs/{pod}.log"] = text
    path = pathlib.Path(args.file or f"{folder}.tar.gz")
    await asyncio.to_thread(_write_private, path, report.bundle(files, taken.timestamp()))
    emit(args, {"file": str(path), "entries": sorted(files)}, f"{path}: {len(files)} files, secrets redacted")
    return 0


async def cmd_etcdctl(args, kube, namespace) -> int:
    """etcdctl through a port-forward as a client identity (etcdctl.py): the one command that
    reads a Secret, the identity's own, and only for a TLS cluster."""
    from etcd_operator.core.cluster.spec import ClusterSpec
    from etcd_operator_kubectl import etcdctl

    try:
        binary = etcdctl.find_binary(args.etcdctl, "etcdctl")
        forward = etcdctl.port_forward_argv(
            etcdctl.find_binary(None, "kubectl"),
            args.kubeconfig,
            args.context,
            namespace,
            args.cluster,
            args.local_port,
        )
        cluster = await kube.get(namespace, "etcdclusters", args.cluster)
        data = None
        if etcdctl.serves_tls(cluster):
            who = etcdctl.identity(ClusterSpec.from_dict(cluster.get("spec") or {}), args.cluster, args.user)
            data = etcdctl.credentials(who, await kube.client_secret(namespace, who.secret))
        elif args.user:
            raise etcdctl.Refused(f"EtcdCluster {args.cluster} serves plaintext: no user has a certificate there")
        return await etcdctl.run_session(etcdctl.Session(forward, binary, args.etcdctl_args, data))
    except etcdctl.Refused as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


async def cmd_benchmark(args, kube, namespace) -> int:
    """etcd's performance check as a Job in the cluster's namespace (benchmark.py); with --wait
    its verdict lines and etcdctl's exit, else the Job's name."""
    from etcd_operator.core.cluster.spec import ClusterSpec
    from etcd_operator_kubectl import etcdctl

    cluster = await kube.get(namespace, "etcdclusters", args.cluster)
    spec = ClusterSpec.from_dict(cluster.get("spec") or {})
    tls, secret = etcdctl.serves_tls(cluster), None
    try:
        if tls:
            secret = etcdctl.identity(spec, args.cluster, args.user).secret  # refuses reserved names first
            if args.user:
                benchmark.declared_certificate_user(spec, args.cluster, args.user)
        elif args.user:
            raise benchmark.Refused(f"EtcdCluster {args.cluster} serves plaintext: no user has a certificate there")
        name = benchmark.job_name(args.cluster, f"{now():%Y%m%d%H%M%S}")
        job = benchmark.benchmark_job(name, namespace, args.cluster, spec, tls, secret, args.load)
    except (benchmark.Refused, etcdctl.Refused) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    await kube.create_job(namespace, job)
    print(f"job.batch/{name} created: etcdctl check perf --load={args.load} against {args.cluster}", file=sys.stderr)
    if not args.wait:
        emit(args, {"job": name}, f"follow it with `kubectl logs -f job/{name} -n {namespace}`")
        return 0
    passed = await first_answer(lambda: kube.job(namespace, name), benchmark.finished, args.timeout, interval=1.0)
    if passed is None:
        print(f"job.batch/{name} has not finished after {args.timeout:.0f}s", file=sys.stderr)
        return 1
    logs = await kube.pod_logs(namespace, f"job-name={name}", None)
    verdicts = benchmark.verdicts("\n".join(logs.values()))
    report = "\n".join(verdicts or [f"no verdict in the log: read it with `kubectl logs job/{name} -n {namespace}`"])
    emit(args, {"job": name, "passed": passed, "verdicts": verdicts}, report)
    return 0 if passed else 1


def _write_private(path: pathlib.Path, data: bytes) -> None:
    """Readable by its owner only: a bundle is about the cluster's inner workings."""
    with open(path, "wb", opener=lambda p, flags: os.open(p, flags, 0o600)) as out:
        out.write(data)


COMMANDS: dict[str, Command] = {
    "status": cmd_status,
    "backups": cmd_backups,
    "restore": cmd_restore,
    "approve-recovery": cmd_approve_recovery,
    "defrag": cmd_defrag,
    "move-leader": cmd_move_leader,
    "benchmark": cmd_benchmark,
    "snapshot": cmd_snapshot,
    "hibernate": cmd_hibernate,
    "wake": cmd_wake,
    "rotate-certificates": cmd_rotate_certificates,
    "logs": cmd_logs,
    "report": cmd_report,
    "etcdctl": cmd_etcdctl,
}
OPERATOR_SELECTOR = "app.kubernetes.io/name=etcd-operator"


def parser() -> argparse.ArgumentParser:
    connection = argparse.ArgumentParser(add_help=False)
    connection.add_argument("-n", "--namespace", help="namespace (default: the context's)")
    connection.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
    connection.add_argument("--context", help="kubeconfig context")
    common = argparse.ArgumentParser(add_help=False, parents=[connection])
    common.add_argument("-o", "--output", choices=("json", "yaml"), help="machine-readable output")
    top = argparse.ArgumentParser(prog="kubectl etcd", description=__doc__)
    sub = top.add_subparsers(dest="command", required=True)
    p = sub.add_parser("status", parents=[common], help="members: role, health, lag, db size, alarms; conditions")
    p.add_argument("cluster")
    p = sub.add_parser("backups", parents=[common], help="an EtcdBackup's snapshots and chain, from its status")
    p.add_argument("backup")
    p = sub.add_parser("restore", parents=[common], help="create an EtcdRestore from a snapshot or point of a backup")
    p.add_argument("backup")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--in-place", metavar="CLUSTER", help="replace this cluster's data")
    target.add_argument("--new-cluster", metavar="NAME", help="restore into a new cluster")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--key", help="the snapshot with this key")
    which.add_argument(
        "--revision", type=int, help="the snapshot at this revision, else this revision replayed from the chain"
    )
    which.add_argument("--time", help="RFC 3339: the revisions the continuous backup had seen by then")
    which.add_argument("--latest", action="store_true", help="the newest revision the continuous backup holds")
    p.add_argument("--size", type=int, help="size of the new cluster (default: the source cluster's)")
    p.add_argument("--name", help="name of the EtcdRestore")
    p.add_argument("--yes", action="store_true", help="do not ask")
    p = sub.add_parser("approve-recovery", parents=[common], help="approve one quorum recovery")
    p.add_argument("cluster")
    p.add_argument("--yes", action="store_true", help="do not ask")
    p = sub.add_parser("defrag", parents=[common], help="ask the operator to defragment every member once")
    p.add_argument("cluster")
    p = sub.add_parser("move-leader", parents=[common], help="ask the operator to move etcd's leadership once")
    p.add_argument("cluster")
    p.add_argument("--to", metavar="MEMBER", help="the member to lead (default: the most advanced healthy follower)")
    p.add_argument("--wait", action="store_true", help="wait until status.leaderMove says how the request ended")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds --wait waits at most (default: 60)")
    p = sub.add_parser(
        "benchmark", parents=[common], help="etcd's performance check (etcdctl check perf) as a Job in the namespace"
    )
    p.add_argument("cluster")
    p.add_argument("--load", default="s", choices=benchmark.LOADS, help="etcdctl's workload model (default: s)")
    p.add_argument("--user", metavar="NAME", help="run as this spec.auth user (default: the cluster's client identity)")
    p.add_argument("--wait", action="store_true", help="wait for the verdict and print the check's report")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds --wait waits at most (default: 300)")
    p = sub.add_parser("snapshot", parents=[common], help="a one-shot EtcdBackup now")
    p.add_argument("cluster")
    p.add_argument(
        "--storage-from",
        metavar="BACKUP",
        required=True,
        help="an EtcdBackup whose storage (bucket, prefix, credentials) to use",
    )
    p.add_argument("--name", help="name of the EtcdBackup")
    p = sub.add_parser("hibernate", parents=[common], help="stop every member, keeping data (spec.hibernation)")
    p.add_argument("cluster")
    p.add_argument("--yes", action="store_true", help="do not ask")
    p = sub.add_parser("wake", parents=[common], help="start a hibernated cluster again")
    p.add_argument("cluster")
    p = sub.add_parser("rotate-certificates", parents=[common], help="renew the leaf certificates now, or the CA")
    p.add_argument("cluster")
    p.add_argument("--ca", action="store_true", help="rotate the CA (members restart twice)")
    p.add_argument("--yes", action="store_true", help="do not ask")
    operator = argparse.ArgumentParser(add_help=False)
    operator.add_argument(
        "--operator-namespace", default="etcd-operator", help="where the operator runs (default: etcd-operator)"
    )
    p = sub.add_parser("logs", parents=[common, operator], help="the operator's log lines about one cluster")
    p.add_argument("cluster")
    p.add_argument("--tail", type=int, help="read only the last N lines of each operator pod")
    p = sub.add_parser(
        "report",
        parents=[common, operator],
        help="a support bundle (objects, events, operator logs; secrets redacted) as a tar.gz",
    )
    p.add_argument("cluster")
    p.add_argument("-f", "--file", help="where to write it (default: etcd-report-NS-CLUSTER-TIME.tar.gz)")
    p = sub.add_parser(
        "etcdctl",
        parents=[connection],
        help="the local etcdctl through a port-forward, as the cluster's client certificate or a user's: "
        "kubectl etcd etcdctl CLUSTER -- ETCDCTL_ARGS...",
    )
    p.add_argument("cluster")
    p.add_argument("--user", help="as this spec.auth user (certificate: true), from Secret CLUSTER-user-USER")
    p.add_argument("--local-port", type=int, help="the local port to forward (default: a free one)")
    p.add_argument("--etcdctl", help="the etcdctl binary (default: etcdctl on PATH)")
    p = sub.add_parser(
        "unseal",
        help="decode a snapshot downloaded from a backup's bucket into etcd's own snapshot file (no cluster needed)",
    )
    p.add_argument("stored", help="the object as stored (compressed, maybe encrypted), or a plain snapshot")
    p.add_argument("plain", help="where to write etcd's snapshot, for etcdutl snapshot restore")
    p.add_argument(
        "--keys-dir",
        help="a folder with one file per key ID holding its key (base64), as `kubectl get secret` data; "
        "needed for an encrypted snapshot",
    )
    return top


def unseal(args: argparse.Namespace) -> int:
    """Works offline: the way back to a plain snapshot when the operator is gone."""
    from etcd_operator.clients.storage.keyring import read_mounted_keys
    from etcd_operator.core.backup import sealed
    from etcd_operator.core.backup.keyring import KeyringError

    partial = pathlib.Path(args.plain + ".partial")
    try:
        keys = read_mounted_keys(args.keys_dir or "")
        decoder = sealed.Decoder(keys)
        with open(args.stored, "rb") as source, open(partial, "wb") as out:
            while chunk := source.read(1 << 20):
                out.write(decoder.feed(chunk))
            out.write(decoder.finish())
    except (KeyringError, sealed.SealedError) as e:
        partial.unlink(missing_ok=True)
        print(f"error: {args.stored} cannot be decoded: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        partial.unlink(missing_ok=True)
        print(f"error: {e}", file=sys.stderr)
        return 1
    partial.rename(args.plain)
    how = f"decoded, {decoder.plain_size} bytes" if decoder.sealed else "not sealed, copied as is"
    print(f"{args.plain}: {how}")
    return 0


def api_error_message(body: bytes | str | None, reason: str | None) -> str:
    """The API server's message from an error response (its body arrives as bytes), else the reason."""
    text = body.decode(errors="replace") if isinstance(body, bytes) else body or ""
    if text.startswith("{"):
        try:
            return json.loads(text).get("message") or reason or ""
        except ValueError:
            pass
    return reason or ""


async def run(args: argparse.Namespace) -> int:
    import aiohttp
    from kubernetes_asyncio.client import ApiException

    from etcd_operator_kubectl.access import Kube

    kube, context_namespace = await Kube.connect(args.kubeconfig, args.context)
    try:
        return await COMMANDS[args.command](args, kube, args.namespace or context_namespace)
    except ApiException as e:
        print(f"error: {api_error_message(e.body, e.reason)}", file=sys.stderr)
        return 1
    except LookupError as e:
        print(f"error: {e.args[0] if e.args else e}", file=sys.stderr)
        return 1
    except (aiohttp.ClientError, OSError) as e:
        print(f"error: cannot reach the API server ({e})", file=sys.stderr)
        return 1
    finally:
        await kube.close()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    passed: list[str] = []
    if argv[:1] == ["etcdctl"] and "--" in argv:  # etcdctl's own arguments, passed as they are
        argv, passed = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    top = parser()
    args = top.parse_args(argv)
    if args.command == "unseal":
        return unseal(args)
    if args.command == "etcdctl":
        if not passed:
            top.error("kubectl etcd etcdctl: give etcdctl's arguments after --, e.g. -- endpoint status")
        args.etcdctl_args = passed
    try:
        return asyncio.run(run(args))
    except KeyboardInterrupt:
        return 130
    except asyncio.CancelledError:  # SIGTERM during kubectl etcd etcdctl, cleaned up
        return 143


if __name__ == "__main__":
    sys.exit(main())
