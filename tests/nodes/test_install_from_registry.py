"""The release installed as a user without a clone installs it: `make release` publishes into a
local OCI registry on the real nodes' bridge (tests/support/oci_registry.py; RELEASE_REGISTRY,
signed with a key made here), then README's quickstart runs with the chart from `oci://`
(`helm install`), the operator's image pulled by the nodes' containerd from that registry (never
imported: the name is the registry's; the index's linux/amd64 image), and `kubectl etcd`
installed from the krew archive into a fresh virtual environment, krew-style. Nothing of the
working tree is used by the commands: they run in an empty folder, the cluster's manifest is
README's own example. Its own release and namespaces; the session's release is fenced out of
the quickstart's namespace while it runs."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import subprocess
import sys
import tarfile

import pytest
import yaml

from images import containerd, names
from localkube import layout as localkube_layout
from localkube import realnodes
from tests.support import chart_release, crds, doc_commands, oci_registry
from tests.support.helm import helm, helm_binary, helm_environment
from tests.support.kubectl import kubectl, kubectl_json
from tests.support.wheels import requires_dist

pytestmark = [
    pytest.mark.needs_nodes,
    pytest.mark.needs_release,
    pytest.mark.lane6,  # a host lane's: beside the node faults, which it waits for
    pytest.mark.usefixtures("nodes_kept_for_the_module", "kubectl_on_real_nodes"),
]

ROOT = pathlib.Path(__file__).resolve().parents[2]
VERSION = "0.1.0"
RELEASE = "etcd-from-registry"  # the release's name and its namespace
WATCHED = "etcd-quickstart-registry"  # README's etcd-quickstart, renamed
PREFIX = "etcd-operator"  # the release's path in the registry: PREFIX/etcd-operator, PREFIX/charts


@pytest.fixture(scope="module", autouse=True)
def crds_installed(kubectl_on_real_nodes):
    """The CRDs, which the quickstart's release leaves to the session's (`crds.install=false`):
    in its host lane, that release may not be installed yet."""
    crds.install()


@pytest.fixture(scope="module")
def registry(real_nodes, tmp_path_factory):
    with oci_registry.running(
        tmp_path_factory.mktemp("registry"), real_nodes.node_network.registry_host(real_nodes.ports)
    ) as running:
        yield running


@pytest.fixture(scope="module")
def release_dir(registry, tmp_path_factory) -> pathlib.Path:
    """`make release` of this commit, published into the registry, as whoever cuts a release
    runs it."""
    out = tmp_path_factory.mktemp("release")
    signing, _ = oci_registry.cosign_key_pair(tmp_path_factory.mktemp("keys"), "a-release-key-for-tests")
    env = {
        **signing,
        **helm_environment(),
        "ALLOW_DIRTY": "1",
        "HELM": str(helm_binary()),
        "RELEASE_REGISTRY": f"{registry.host}/{PREFIX}",
        "RELEASE_PLAIN_HTTP": "1",
    }
    done = subprocess.run(
        [str(ROOT / "packaging" / "release.sh"), str(out)], capture_output=True, text=True, timeout=900, env=env
    )
    assert done.returncode == 0, done.stderr
    return out


def node_sockets(where: localkube_layout.Layout) -> list[pathlib.Path]:
    return [realnodes.containerd_socket(where, i) for i in range(1, localkube_layout.NODE_COUNT + 1)]


def forget_on_nodes(where: localkube_layout.Layout, repository: str) -> None:
    """The repository's images (by tag or digest) removed from every node, as an earlier run may
    have left them: this run's pods must pull."""
    for socket in node_sockets(where):
        for name in containerd.image_names(socket):
            if name.startswith((f"{repository}:", f"{repository}@")):
                containerd.ctr(socket, "images", "rm", "--sync", name)
        assert not [n for n in containerd.image_names(socket) if n.startswith(repository)], socket


def quickstart(registry_chart: str, image: str) -> tuple[str, str]:
    """README's quickstart block in two parts (before and after the watched namespace exists),
    with the chart from the registry and the image of the registry; its own release and
    namespaces; `kubectl etcd status` of the cluster once it is Ready. Each replaced text must
    be in the block as printed, so that a changed README fails here instead of being skipped."""
    text = doc_commands.block("README.md", "helm install etcd-operator").text
    replacements = [
        (
            "helm install etcd-operator charts/etcd-operator -n etcd-operator --create-namespace",
            f"helm install {RELEASE} {registry_chart} --version {VERSION} --plain-http -n {RELEASE}"
            f" --create-namespace --set crds.install=false --set image.repository={image}",
        ),
        ("helm uninstall etcd-operator -n etcd-operator", f"helm uninstall {RELEASE} -n {RELEASE}"),
        ("-f examples/etcdcluster.yaml", "-f etcdcluster.yaml"),
        ("etcd-quickstart", WATCHED),
    ]
    for old, new in replacements:
        assert old in text, f"README's quickstart no longer holds {old!r}"
        text = text.replace(old, new)
    wait = f"kubectl wait -n {WATCHED} etcdcluster/demo --for=condition=Ready --timeout=300s\n"
    assert wait in text, text
    text = text.replace(wait, wait + f"kubectl etcd status demo -n {WATCHED}\n")
    create = f"kubectl create namespace {WATCHED}\n"
    before, after = text.split(create)
    return before + create, after


def readme_example(name: str) -> str:
    """README's YAML block that follows the mention of `name`."""
    readme = (ROOT / "README.md").read_text()
    found = re.search(rf"\(`{re.escape(name)}`\):\n\n```yaml\n(.*?)```", readme, re.S)
    assert found, f"README shows no {name}"
    return found.group(1)


def plugin_from_krew_archive(release_dir: pathlib.Path, home: pathlib.Path) -> pathlib.Path:
    """What `kubectl krew install --manifest=krew.yaml --archive=…` does, by hand: the archive
    checked against the manifest's sha256, unpacked into the store, its `bin` linked into a
    folder for PATH; the plugin's dependencies (the wheel's Requires-Dist) in a fresh virtual
    environment whose python runs it. Returns the folder for PATH."""
    manifest = yaml.safe_load((release_dir / "krew.yaml").read_text())
    (platform,) = manifest["spec"]["platforms"]
    archive = release_dir / platform["uri"].rsplit("/", 1)[1]
    assert hashlib.sha256(archive.read_bytes()).hexdigest() == platform["sha256"]
    store = home / "store" / "etcd" / manifest["spec"]["version"]
    store.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        tar.extractall(store, filter="data")
    bin_dir = home / "bin"
    bin_dir.mkdir()
    (bin_dir / "kubectl-etcd").symlink_to(store / platform["bin"])

    venv = home / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    requirements = requires_dist(release_dir / f"kubectl_etcd-{VERSION}-py3-none-any.whl")
    assert requirements, "the wheel names no Requires-Dist"
    pip = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", *requirements],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert pip.returncode == 0, pip.stderr
    # The plugin's own modules come from the archive only.
    alone = subprocess.run(
        [str(venv / "bin" / "python"), "-I", "-c", "import etcd_operator_kubectl"], cwd=home, capture_output=True
    )
    assert alone.returncode != 0
    return bin_dir


def pulls(namespace: str, image: str) -> list[str]:
    """The namespace's events of the kubelet pulling `image` (not finding it already present)."""
    events = kubectl_json("get", "events", "-n", namespace)["items"]
    return [
        e["message"]
        for e in events
        if e.get("reason") == "Pulled" and e.get("message", "").startswith(f'Successfully pulled image "{image}"')
    ]


def imported_image_starts_on_every_node(namespace: str) -> None:
    """The nodes' imported operator image (the one every other test's pods run) still starts on
    each node without a pull once the nodes pulled the same image under the registry's name:
    the kubelet records pulls by image ID, and no registry here serves the imported name."""
    pods = {f"imported-image-node-{i}": f"node-{i}" for i in range(1, localkube_layout.NODE_COUNT + 1)}
    for pod, node in pods.items():
        on_node = json.dumps({"apiVersion": "v1", "spec": {"nodeName": node}})
        kubectl(
            "run", pod, "-n", namespace, f"--image={names.OPERATOR}", "--image-pull-policy=IfNotPresent",
            "--restart=Never", f"--overrides={on_node}", "--command", "--", "python", "-c", "pass",
        )  # fmt: skip
    for pod in pods:
        kubectl("wait", "-n", namespace, f"pod/{pod}", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=120s")
    assert not pulls(namespace, names.OPERATOR), kubectl("get", "events", "-n", namespace).stdout


def test_the_quickstart_runs_from_the_published_release(real_nodes, registry, release_dir, tmp_path):
    where = real_nodes
    image_repository = f"{registry.host}/{PREFIX}/etcd-operator"
    image_ref = f"{image_repository}:{VERSION}"
    forget_on_nodes(where, image_repository)
    bin_dir = plugin_from_krew_archive(release_dir, tmp_path / "krew")
    workdir = tmp_path / "user"
    workdir.mkdir()
    (workdir / "etcdcluster.yaml").write_text(readme_example("examples/etcdcluster.yaml"))
    testbin = localkube_layout.testbin_dir()
    tools = [bin_dir, testbin / "helm", testbin / "kube"]
    env = {
        **os.environ,
        **helm_environment(),
        "PATH": ":".join([*map(str, tools), os.environ["PATH"]]),
        "KUBECTL_ETCD_PYTHON": str(tmp_path / "krew" / "venv" / "bin" / "python"),
    }

    def run(script: str) -> str:
        done = subprocess.run(
            ["bash", "-c", "set -euxo pipefail\n" + script],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done.stdout

    prefix = f"{registry.host}/{PREFIX}"
    digest, _ = registry.manifest(f"{PREFIX}/etcd-operator", VERSION)
    # The version, and cosign's signature and attestations beside it (tags named by digest).
    tags = registry.tags(f"{PREFIX}/etcd-operator")
    assert VERSION in tags and f"sha256-{digest.removeprefix('sha256:')}.sig" in tags, tags
    assert registry.tags(f"{PREFIX}/charts/etcd-operator") == [VERSION]

    first, rest = quickstart(f"oci://{prefix}/charts/etcd-operator", f"{prefix}/etcd-operator")
    try:
        run(first)
        with chart_release.fenced_out(WATCHED):
            output = run(rest)
        assert "demo" in output and "Running" in output, output
        # kubectl etcd status: its header and one line per member
        assert f"Cluster {WATCHED}/demo: phase Running" in output, output
        assert len(re.findall(r"^demo-\d+\s", output, re.M)) == 3, output

        # The operator's pods ran the registry's image, pulled by the nodes from the registry.
        assert pulls(RELEASE, image_ref), kubectl("get", "events", "-n", RELEASE).stdout
        node_addresses = {where.node_network.node_address(i) for i in range(1, localkube_layout.NODE_COUNT + 1)}
        fetches = registry.manifest_fetches(f"{PREFIX}/etcd-operator", VERSION)
        assert any(address in line for line in fetches for address in node_addresses), fetches
        held = {
            str(socket): containerd.image_digests(socket).get(image_ref)
            for socket in node_sockets(where)
            if image_ref in containerd.image_names(socket)
        }
        assert held and set(held.values()) == {digest}, (held, digest)
        imported_image_starts_on_every_node(RELEASE)  # README deleted WATCHED
    finally:
        helm("uninstall", RELEASE, "-n", RELEASE, check=False)
        kubectl("delete", "namespace", WATCHED, RELEASE, "--ignore-not-found", "--wait=false", check=False)
        forget_on_nodes(where, image_repository)
