"""kubectl-etcd's command line: kubectl's flags, and no change without a confirmation."""

from __future__ import annotations

import asyncio
import io

import pytest

from etcd_operator_kubectl import cli


def test_kubectl_conventions_are_accepted_on_every_command():
    for argv in (
        ["status", "c"],
        ["backups", "b"],
        ["restore", "b", "--in-place", "c"],
        ["approve-recovery", "c"],
        ["defrag", "c"],
        ["move-leader", "c", "--to", "c-1", "--wait"],
        ["benchmark", "c", "--load", "m", "--user", "u", "--wait"],
        ["snapshot", "c", "--storage-from", "b"],
        ["hibernate", "c"],
        ["wake", "c"],
        ["rotate-certificates", "c", "--ca"],
        ["logs", "c", "--operator-namespace", "ops"],
        ["report", "c", "-f", "r.tar.gz"],
    ):
        args = cli.parser().parse_args(argv + ["-n", "ns", "-o", "yaml", "--kubeconfig", "/k", "--context", "x"])
        assert (args.namespace, args.output, args.kubeconfig, args.context) == ("ns", "yaml", "/k", "x")
    # etcdctl prints what etcdctl prints: its own -w, no -o.
    args = cli.parser().parse_args(["etcdctl", "c", "-n", "ns", "--kubeconfig", "/k", "--context", "x"])
    assert (args.namespace, args.kubeconfig, args.context) == ("ns", "/k", "x")
    assert set(cli.COMMANDS) == {
        "status",
        "backups",
        "restore",
        "approve-recovery",
        "defrag",
        "move-leader",
        "benchmark",
        "snapshot",
        "hibernate",
        "wake",
        "rotate-certificates",
        "logs",
        "report",
        "etcdctl",
    }


def test_restore_needs_exactly_one_target():
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["restore", "b"])
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["restore", "b", "--in-place", "c", "--new-cluster", "d"])
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["restore", "b", "--in-place", "c", "--revision", "5", "--latest"])


class RecordingKube:
    def __init__(self, cluster, backup=None):
        self.cluster, self.backup, self.patches, self.created = cluster, backup, [], []

    async def get(self, namespace, plural, name):
        return self.backup if plural == "etcdbackups" else self.cluster

    async def annotate(self, namespace, plural, name, annotations):
        self.patches.append(annotations)
        return {"metadata": {"annotations": annotations}}

    async def patch(self, namespace, plural, name, body):
        self.patches.append(body)
        return body

    async def create(self, namespace, plural, body):
        self.created.append((plural, body))
        return body


@pytest.mark.parametrize("answer, patched", [("", False), ("n\n", False), ("y\n", True)])
def test_approve_recovery_changes_nothing_unless_confirmed(monkeypatch, answer, patched):
    stdin = io.StringIO(answer)
    stdin.isatty = lambda: True
    monkeypatch.setattr("sys.stdin", stdin)
    kube = RecordingKube({"metadata": {"name": "c"}, "status": {"conditions": []}})
    args = cli.parser().parse_args(["approve-recovery", "c"])
    code = asyncio.run(cli.cmd_approve_recovery(args, kube, "ns"))
    assert (code == 0) == patched and bool(kube.patches) == patched


def test_without_a_terminal_only_yes_confirms(monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))  # piped "y" is not a person answering
    kube = RecordingKube({"metadata": {"name": "c"}, "status": {}})
    assert asyncio.run(cli.cmd_approve_recovery(cli.parser().parse_args(["approve-recovery", "c"]), kube, "ns")) == 1
    assert (
        asyncio.run(cli.cmd_approve_recovery(cli.parser().parse_args(["approve-recovery", "c", "--yes"]), kube, "ns"))
        == 0
    )
    assert kube.patches == [{"etcd.operator.dev/approve-quorum-recovery": "true"}]


def test_output_follows_kubectl_formats(capsys):
    import json

    import yaml

    for fmt, load in (("json", json.loads), ("yaml", yaml.safe_load)):
        cli.emit(cli.parser().parse_args(["status", "c", "-o", fmt]), {"name": "c", "members": []}, "table")
        assert load(capsys.readouterr().out) == {"name": "c", "members": []}
    cli.emit(cli.parser().parse_args(["status", "c"]), {"name": "c"}, "table")
    assert capsys.readouterr().out == "table\n"


def test_an_api_error_is_reported_by_its_message_as_the_client_delivers_it():
    """kubernetes_asyncio hands the error body over as bytes."""
    body = b'{"kind":"Status","message":"etcdclusters.etcd.operator.dev \\"nope\\" not found","reason":"NotFound"}'
    assert cli.api_error_message(body, "Not Found") == 'etcdclusters.etcd.operator.dev "nope" not found'
    assert cli.api_error_message(body.decode(), "Not Found") == 'etcdclusters.etcd.operator.dev "nope" not found'
    assert cli.api_error_message(b"<html>bad gateway</html>", "Bad Gateway") == "Bad Gateway"
    assert cli.api_error_message(None, "Forbidden") == "Forbidden"


def _sealed_file(tmp_path, plain: bytes, encoding) -> str:
    from etcd_operator.core.backup import sealed

    stored = tmp_path / "stored.db"
    stored.write_bytes(b"".join(sealed.encode([plain[i : i + 4096] for i in range(0, len(plain), 4096)], encoding)))
    return str(stored)


def test_unseal_gives_back_etcds_snapshot_offline_with_the_right_key(tmp_path, capsys):
    import base64
    import os

    from etcd_operator.core.backup import sealed
    from etcd_operator_kubectl.cli import main

    plain = os.urandom(20_000) + b"etcd" * 10_000
    key = os.urandom(32)
    encoding = sealed.Encoding(compression="zstd", algorithm="aes-256-gcm", key_id="k1", key=key)
    stored = _sealed_file(tmp_path, plain, encoding)
    assert plain not in (tmp_path / "stored.db").read_bytes()
    keys = tmp_path / "keys"
    keys.mkdir()
    (keys / "k1").write_text(base64.b64encode(key).decode())
    out = tmp_path / "plain.db"
    assert main(["unseal", stored, str(out), "--keys-dir", str(keys)]) == 0
    assert out.read_bytes() == plain

    (keys / "k1").write_text(base64.b64encode(os.urandom(32)).decode())
    wrong = tmp_path / "wrong.db"
    assert main(["unseal", stored, str(wrong), "--keys-dir", str(keys)]) == 1
    assert not wrong.exists() and not (tmp_path / "wrong.db.partial").exists()
    assert "cannot be decoded" in capsys.readouterr().err
    assert main(["unseal", stored, str(wrong)]) == 1  # no keys at all


def test_unseal_copies_a_plain_snapshot_as_it_is(tmp_path):
    from etcd_operator_kubectl.cli import main

    plain = tmp_path / "plain-in.db"
    plain.write_bytes(b"\x00" * 5000 + b"bolt")
    out = tmp_path / "out.db"
    assert main(["unseal", str(plain), str(out)]) == 0
    assert out.read_bytes() == plain.read_bytes()


def test_restore_creates_the_etcdrestore_from_the_backups_status_once_confirmed(capsys):
    from tests.unit.test_kubectl_etcd_views import BACKUP, backup_object, key, streaming, three_runs

    kube = RecordingKube({"spec": {"size": 3}}, backup_object(streaming(three_runs())))
    args = cli.parser().parse_args(["restore", BACKUP, "--in-place", "app", "--revision", "239"])
    assert asyncio.run(cli.cmd_restore(args, kube, "ns")) == 1 and kube.created == []  # no terminal, no --yes
    args = cli.parser().parse_args(["restore", BACKUP, "--in-place", "app", "--revision", "239", "--yes"])
    assert asyncio.run(cli.cmd_restore(args, kube, "ns")) == 0
    ((plural, body),) = kube.created
    assert plural == "etcdrestores" and body["metadata"]["name"] == "app-from-239"
    assert body["spec"]["source"] == {"backupRef": {"name": BACKUP}, "pointInTime": {"revision": 239}}
    args = cli.parser().parse_args(["restore", BACKUP, "--new-cluster", "copy", "--size", "1", "--yes"])
    assert asyncio.run(cli.cmd_restore(args, kube, "ns")) == 0
    newest = kube.created[-1][1]["spec"]
    assert newest["source"]["backupRef"]["key"] == key("20261121T110000Z")
    assert newest["target"] == {"newCluster": {"name": "copy", "spec": {"size": 1}}}
    assert "will restore" in capsys.readouterr().err


def test_hibernate_asks_then_sets_the_spec_field_and_wake_clears_it():
    kube = RecordingKube({})
    assert asyncio.run(cli.cmd_hibernate(cli.parser().parse_args(["hibernate", "c"]), kube, "ns")) == 1
    assert kube.patches == []
    assert asyncio.run(cli.cmd_hibernate(cli.parser().parse_args(["hibernate", "c", "--yes"]), kube, "ns")) == 0
    assert asyncio.run(cli.cmd_wake(cli.parser().parse_args(["wake", "c"]), kube, "ns")) == 0
    assert kube.patches == [
        {"spec": {"hibernation": {"enabled": True}}},
        {"spec": {"hibernation": {"enabled": False}}},
    ]


def test_rotate_certificates_sets_the_annotations_the_operator_honours():
    from etcd_operator.core.cluster import naming

    kube = RecordingKube({})
    assert (
        asyncio.run(cli.cmd_rotate_certificates(cli.parser().parse_args(["rotate-certificates", "c"]), kube, "ns")) == 0
    )
    args = cli.parser().parse_args(["rotate-certificates", "c", "--ca"])
    assert asyncio.run(cli.cmd_rotate_certificates(args, kube, "ns")) == 1  # the CA: only once confirmed
    args = cli.parser().parse_args(["rotate-certificates", "c", "--ca", "--yes"])
    assert asyncio.run(cli.cmd_rotate_certificates(args, kube, "ns")) == 0
    assert [list(p) for p in kube.patches] == [[naming.ANNOTATION_ROTATE_CERTIFICATES], [naming.ANNOTATION_ROTATE_CA]]
    tokens = [v for p in kube.patches for v in p.values()]
    assert all(tokens) and len(set(tokens)) == 2  # a new value each time: each one is a new request


class LeaderMoveKube(RecordingKube):
    """Answers with status.leaderMove holding `outcome` for the request last annotated."""

    def __init__(self, cluster, outcome):
        super().__init__(cluster)
        self.outcome = outcome

    async def get(self, namespace, plural, name):
        request = self.patches[-1]["etcd.operator.dev/move-leader"] if self.patches else None
        return {
            **self.cluster,
            "status": {**self.cluster["status"], "leaderMove": {"lastToken": request, "outcome": self.outcome}},
        }


CLUSTER_OF_THREE = {
    "metadata": {"name": "c"},
    "status": {
        "members": [
            {"name": "c-0", "role": "leader", "healthy": True, "revision": 9},
            {"name": "c-1", "role": "follower", "healthy": True, "revision": 8},
            {"name": "c-2", "role": "follower", "healthy": True, "revision": 9},
        ]
    },
}


def test_move_leader_asks_for_the_most_advanced_follower_unless_told_one():
    kube = RecordingKube(CLUSTER_OF_THREE)
    assert asyncio.run(cli.cmd_move_leader(cli.parser().parse_args(["move-leader", "c"]), kube, "ns")) == 0
    assert (
        asyncio.run(cli.cmd_move_leader(cli.parser().parse_args(["move-leader", "c", "--to", "c-1"]), kube, "ns")) == 0
    )
    first, second = (patch["etcd.operator.dev/move-leader"] for patch in kube.patches)
    assert first.endswith(" to c-2") and second.endswith(" to c-1") and first.split()[0] != second.split()[0]


@pytest.mark.parametrize("outcome, code", [("moved from c-0 to c-2", 0), ("refused: c-2 is not a voting member", 1)])
def test_move_leader_waits_for_the_outcome_and_fails_on_a_refusal(capsys, outcome, code):
    kube = LeaderMoveKube(CLUSTER_OF_THREE, outcome)
    args = cli.parser().parse_args(["move-leader", "c", "--wait"])
    assert asyncio.run(cli.cmd_move_leader(args, kube, "ns")) == code
    assert outcome in capsys.readouterr().out


def test_move_leader_without_a_healthy_follower_asks_nothing():
    alone = {"metadata": {"name": "c"}, "status": {"members": [{"name": "c-0", "role": "leader", "healthy": True}]}}
    kube = RecordingKube(alone)
    assert asyncio.run(cli.cmd_move_leader(cli.parser().parse_args(["move-leader", "c"]), kube, "ns")) == 1
    assert kube.patches == []
