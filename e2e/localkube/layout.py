"""Where the local substrate keeps its files and which ports and addresses it uses.

Every instance gets its own port block, derived from its root's path, so two checkouts on
one machine do not collide; its real nodes get a 10.Y.0.0/16 of their own, derived the same way.

A checkout's default instance (`make up`) is rooted at the checkout; the tests' instance is
rooted below its `.localkube` (REAL_NODES_TEST_ROOT), so that `make test` never touches what
`make up` runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pathlib
import subprocess

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
REAL_NODES_TEST_ROOT = REPO_ROOT / ".localkube" / "realnodes-test"
PORT_BLOCK_SIZE = 20
FIRST_PORT_BASE = 20000
# 20000 .. 32760: below Linux's ephemeral range (32768-60999), so that no outgoing
# connection of the substrate itself can take a port of a block.
PORT_BLOCKS = 638


@dataclasses.dataclass(frozen=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    minio: int
    minio_console: int
    operator_health: int
    operator_metrics: int
    kube_scheduler: int
    registry: int  # a local OCI registry on the bridge, when a test starts one (tests/support/oci_registry.py)

    @classmethod
    def from_base(cls, base: int) -> Ports:
        names = [f.name for f in dataclasses.fields(cls)]
        return cls(**{name: base + offset for offset, name in enumerate(names)})

    def named(self) -> dict[str, int]:
        return dataclasses.asdict(self)


NODE_COUNT = 3
CLUSTER_DOMAIN = "cluster.local"  # the real nodes' (kubelets, CoreDNS, the host's search list)


@dataclasses.dataclass(frozen=True)
class NodeNetwork:
    """Addresses of the real-node substrate inside 10.<octet>.0.0/16:
    10.o.0.0/24 the bridge (host side .1) and the nodes (.11, .12, ...),
    10.o.(64+i).0/24 the pods of node i (all inside 10.o.64.0/19), 10.o.96.0/24 the Services."""

    octet: int

    @property
    def block(self) -> str:
        return f"10.{self.octet}.0.0/16"

    @property
    def node_subnet(self) -> str:
        return f"10.{self.octet}.0.0/24"

    @property
    def bridge_address(self) -> str:
        return f"10.{self.octet}.0.1"

    @property
    def dns_address(self) -> str:
        return self.bridge_address

    def node_address(self, index: int) -> str:
        return f"10.{self.octet}.0.{10 + index}"

    def pod_cidr(self, index: int) -> str:
        return f"10.{self.octet}.{64 + index}.0/24"

    @property
    def pods_cidr(self) -> str:
        return f"10.{self.octet}.64.0/19"

    @property
    def service_cidr(self) -> str:
        return f"10.{self.octet}.96.0/24"

    @property
    def kubernetes_service_ip(self) -> str:
        return f"10.{self.octet}.96.1"

    def registry_host(self, ports: Ports) -> str:
        """host:port of the local OCI registry, on the bridge where the nodes reach it."""
        return f"{self.bridge_address}:{ports.registry}"


@dataclasses.dataclass(frozen=True)
class Layout:
    root: pathlib.Path
    checkout_id: str
    ports: Ports
    pod_subnet_octet: int
    testbin: pathlib.Path
    node_network: NodeNetwork = NodeNetwork(octet=1)

    @property
    def state_dir(self) -> pathlib.Path:
        return self.root / ".localkube"

    @property
    def pki_dir(self) -> pathlib.Path:
        return self.state_dir / "pki"

    @property
    def logs_dir(self) -> pathlib.Path:
        return self.state_dir / "logs"

    @property
    def run_dir(self) -> pathlib.Path:
        return self.state_dir / "run"

    @property
    def data_dir(self) -> pathlib.Path:
        return self.state_dir / "data"

    @property
    def kubeconfig(self) -> pathlib.Path:
        return self.state_dir / "kubeconfig"

    @property
    def env_file(self) -> pathlib.Path:
        return self.state_dir / "env"

    def binary(self, recipe: str, name: str) -> pathlib.Path:
        return self.testbin / recipe / name

    def etcd_binary_dir(self, minor: str) -> pathlib.Path:
        return self.testbin / f"etcd-{minor}"


def checkout_id(root: pathlib.Path) -> str:
    return hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:10]


def port_base_for(identity: str) -> int:
    block = int(identity, 16) % PORT_BLOCKS
    return FIRST_PORT_BASE + block * PORT_BLOCK_SIZE


def pod_octet_for(identity: str) -> int:
    # 127.0.x.x stays for the control plane itself; 127.255 is avoided too.
    return 1 + int(identity, 16) % 253


def node_octet_for(identity: str) -> int:
    # 10.0 holds the default mode's Service range; 10.255 this machine's resolver.
    return 1 + int(identity, 16) // 7 % 250


def testbin_dir() -> pathlib.Path:
    configured = os.environ.get("ETCD_OPERATOR_TESTBIN")
    if configured:
        return pathlib.Path(configured)
    script = REPO_ROOT / "e2e" / "testbin" / "build.sh"
    out = subprocess.run([str(script), "--dir"], check=True, capture_output=True, text=True)
    return pathlib.Path(out.stdout.strip())


def current(root: pathlib.Path | None = None) -> Layout:
    """The instance rooted at `root`; without one, the instance whose state directory
    LOCALKUBE_STATE_DIR names (what its env file exports and its processes are given), else
    the checkout's default instance."""
    if root is None:
        state_dir = os.environ.get("LOCALKUBE_STATE_DIR")
        root = pathlib.Path(state_dir).resolve().parent if state_dir else REPO_ROOT
    identity = checkout_id(root)
    base = int(os.environ.get("LOCALKUBE_PORT_BASE", port_base_for(identity)))
    octet = int(os.environ.get("LOCALKUBE_POD_OCTET", pod_octet_for(identity)))
    return Layout(
        root=root,
        checkout_id=identity,
        ports=Ports.from_base(base),
        pod_subnet_octet=octet,
        testbin=testbin_dir(),
        node_network=NodeNetwork(int(os.environ.get("LOCALKUBE_NODE_OCTET", node_octet_for(identity)))),
    )


def replay_apply_program() -> str:
    """etcd-replay-apply (cmd/etcd-replay-apply, the replay pod's writer into a restored
    backend), built with the local Go and cached by cmd/etcd-replay-apply/build.sh: for the
    tests and the bench that run the replay's steps outside a pod."""
    built = subprocess.run(
        [str(REPO_ROOT / "cmd" / "etcd-replay-apply" / "build.sh")], capture_output=True, text=True, timeout=1200
    )
    if built.returncode != 0:
        raise RuntimeError(f"cmd/etcd-replay-apply/build.sh failed: {built.stderr.strip()}")
    return built.stdout.strip().splitlines()[-1]
