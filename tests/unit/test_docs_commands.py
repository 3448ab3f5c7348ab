"""Every shell block of README.md and docs/ is run by a named test, or says why it cannot be
run here: a new block without either fails, and so does an entry whose block is gone."""

from __future__ import annotations

import re

import pytest

from tests.support import doc_commands

ROOT = doc_commands.ROOT
CI = ".ci/run"
JOURNEYS = "e2e/journeys/test_journeys.py"

HIBERNATION = "tests/nodes/host_operator/test_hibernation.py"
RELEASE_PUBLISHED = "tests/release/test_release_published.py"
HIBERNATE_AND_WAKE = "test_hibernate_and_wake_keeps_every_key_and_the_identity"
ETCDCTL = (
    "tests/nodes/test_kubectl_etcd.py::test_kubectl_etcd_etcdctl_writes_and_reads_as_the_clusters_client_certificate"
)
SLEEP = """kubectl patch etcdcluster NAME --type=merge -p '{"spec":{"hibernation":{"enabled":true"""
WAKE = """kubectl patch etcdcluster NAME --type=merge -p '{"spec":{"hibernation":{"enabled":false"""

# (page, the start of the block's first line) -> the test that runs it ("file::test"), or CI
# for README's two commands, which .ci/run runs as they are printed.
RUN_BY = {
    ("docs/operations/restore.md", "kubectl etcd unseal"): (
        "tests/nodes/host_operator/test_restore_encrypted.py::test_the_unseal_commands_of_the_restore_page_run_as_printed"
    ),
    ("docs/operations/restore.md", "etcdutl snapshot status"): (
        "tests/nodes/host_operator/test_restore_encrypted.py::test_the_unseal_commands_of_the_restore_page_run_as_printed"
    ),
    ("README.md", "make demo"): CI,
    ("README.md", "helm install etcd-operator"): f"{JOURNEYS}::test_the_readme_quickstart_runs_as_printed",
    ("docs/development.md", "make demo"): CI,
    ("docs/development.md", "E2E_TARGET=external"): (
        "tests/nodes/test_e2e_scenarios_on_real_nodes.py::test_e2e_scenarios_pass_in_external_mode"
    ),
    ("docs/install.md", "helm install etcd-operator"): f"{JOURNEYS}::test_the_install_page_commands_run_as_printed",
    ("docs/operations/healing.md", "kubectl annotate etcdcluster"): (
        "tests/nodes/host_operator/test_cluster.py::"
        "test_quorum_loss_waits_for_approval_then_recovers_from_the_best_survivor"
    ),
    (
        "docs/operations/hibernation.md",
        SLEEP,
    ): f"{HIBERNATION}::test_hibernate_and_wake_keeps_every_key_and_the_identity",
    (
        "docs/operations/hibernation.md",
        WAKE,
    ): f"{HIBERNATION}::test_hibernate_and_wake_keeps_every_key_and_the_identity",
    ("docs/operations/kubectl-plugin.md", "kubectl etcd benchmark"): (
        "tests/nodes/host_operator/test_benchmark.py::test_the_benchmark_job_reports_etcds_verdicts_and_leaves_no_key"
    ),
    ("docs/operations/kubectl-plugin.md", "kubectl etcd move-leader"): (
        "tests/nodes/test_kubectl_etcd.py::"
        "test_kubectl_etcd_move_leader_hands_over_while_clients_keep_their_lease_lock_and_watch"
    ),
    ("docs/operations/kubectl-plugin.md", "kubectl etcd etcdctl CLUSTER -- put"): ETCDCTL,
    ("docs/operations/kubectl-plugin.md", "kubectl etcd etcdctl CLUSTER -- get"): ETCDCTL,
    ("docs/operations/releasing.md", "cosign verify --key"): (
        f"{RELEASE_PUBLISHED}::test_the_verify_commands_of_the_releasing_page_run_as_printed"
    ),
    ("docs/operations/releasing.md", "cosign verify-attestation --key"): (
        f"{RELEASE_PUBLISHED}::test_the_verify_commands_of_the_releasing_page_run_as_printed"
    ),
    ("docs/operations/sharding.md", "helm install etcd-shard-a"): (
        f"{JOURNEYS}::test_the_sharding_page_commands_run_as_printed"
    ),
}
NOT_RUN_HERE = {
    ("docs/install.md", "kind build node-image"): (
        "kind needs a Docker engine, which this machine does not have; `make e2e-kind` runs the same steps where one is"
    ),
}


def every_block() -> list[doc_commands.Block]:
    return [b for page in doc_commands.pages() for b in doc_commands.blocks(page)]


def entry(block: doc_commands.Block) -> list[tuple[str, str]]:
    return [key for key in (*RUN_BY, *NOT_RUN_HERE) if key[0] == block.page and block.first_line.startswith(key[1])]


def test_the_docs_have_shell_blocks_to_check():
    assert len(every_block()) >= len(RUN_BY) + len(NOT_RUN_HERE)


@pytest.mark.parametrize("block", every_block(), ids=lambda b: f"{b.page}:{b.line}")
def test_each_shell_block_is_run_by_a_test_or_says_why_not(block):
    assert len(entry(block)) == 1, (
        f"{block.page}:{block.line} ({block.first_line!r}): name the test that runs it in RUN_BY, "
        "or why it cannot run here in NOT_RUN_HERE"
    )


@pytest.mark.parametrize("key", [*RUN_BY, *NOT_RUN_HERE], ids=lambda k: f"{k[0]}:{k[1]}")
def test_each_entry_still_names_one_block(key):
    doc_commands.block(*key)  # raises unless exactly one block starts so


@pytest.mark.parametrize("key", [k for k, runner in RUN_BY.items() if runner != CI], ids=lambda k: f"{k[0]}:{k[1]}")
def test_the_named_test_exists_and_reads_its_block_from_the_page(key):
    page, starts_with = key
    path, test = RUN_BY[key].split("::")
    source = (ROOT / path).read_text()
    assert re.search(rf"^def {test}\(", source, re.M), f"{path} has no {test}"
    body = source.split(f"def {test}(", 1)[1].split("\ndef ", 1)[0]
    assert "doc_commands." in body and f'"{page}"' in body and f'"{starts_with}' in body, (
        f"{path}::{test} does not read {page}'s block starting {starts_with!r} with doc_commands"
    )


@pytest.mark.parametrize("key", [k for k, runner in RUN_BY.items() if runner == CI], ids=lambda k: k[0])
def test_the_commands_ci_runs_are_the_ones_printed(key):
    ci_lines = {line.strip() for line in (ROOT / CI).read_text().splitlines()}
    for line in doc_commands.block(*key).text.splitlines():
        command = line.split("#", 1)[0].strip()
        if command:
            assert command in ci_lines, f"{key[0]} prints `{command}`, which {CI} does not run"
