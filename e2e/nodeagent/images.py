"""The image map: which local executable a container image stands for.

- etcd images (repository ending in `etcd`, tag carrying a version such as v3.5.35 or
  3.5.12-0) run the testbin binaries of that minor version, except the patches listed in
  PINNED_PATCHES, which run their own recipe (an old patch for the upgrade-gate tests);
- the operator's image (repository ending in `etcd-operator`) runs this checkout's Python;
- busybox runs the host's /bin/sh and coreutils;
- anything else is an unknown image (the container waits in ErrImagePull/ImagePullBackOff).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import sys

from localkube.layout import REPO_ROOT

HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ETCD_TOOLS = ("etcd", "etcdctl", "etcdutl")
ETCD_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")
# Exact etcd versions built by a recipe of their own (e2e/testbin/<recipe>/go.mod pins it).
PINNED_PATCHES = {"3.5.21": "etcd-3.5-old"}
PYTHON_NAMES = re.compile(r"^python(3(\.\d+)?)?$")


class UnknownImage(Exception):
    pass


@dataclasses.dataclass(frozen=True)
class Reference:
    repository: str  # registry and path, without tag or digest
    tag: str | None

    @property
    def name(self) -> str:
        """The repository's last path element: `etcd` for quay.io/coreos/etcd."""
        return self.repository.rsplit("/", 1)[-1]


def parse_reference(image: str) -> Reference:
    rest = image.split("@", 1)[0]
    tag = None
    last_slash = rest.rfind("/")
    colon = rest.rfind(":")
    if colon > last_slash:
        rest, tag = rest[:colon], rest[colon + 1 :]
    return Reference(rest, tag)


@dataclasses.dataclass(frozen=True)
class ImageRuntime:
    """How to run containers of one image on this machine."""

    kind: str  # "etcd" | "operator" | "busybox"
    entrypoint: tuple[str, ...]
    default_args: tuple[str, ...]
    path: str
    env: tuple[tuple[str, str], ...] = ()
    bin_dir: pathlib.Path | None = None
    # Variables the image's program reads for its bind address, set to the pod IP unless
    # the container sets them: what it would otherwise bind by default is the wildcard.
    pod_ip_env: tuple[str, ...] = ()

    def argv(self, command: list[str] | None, args: list[str] | None, pod_ip: str) -> list[str]:
        """Kubernetes' rule: command replaces the entrypoint (and drops the image's
        default args); args alone replace the default args."""
        if command:
            argv = list(command) + list(args or [])
        elif args:
            argv = list(self.entrypoint) + list(args)
        else:
            argv = list(self.entrypoint) + self._default_args(pod_ip)
        if self.kind == "busybox" and len(argv) > 1 and os.path.basename(argv[0]) == "busybox":
            argv = argv[1:]  # `busybox sh -c ...` runs the host's sh
        if not argv:
            raise UnknownImage("no command given and the image has no default command")
        return [self.executable(argv[0])] + argv[1:]

    def _default_args(self, pod_ip: str) -> list[str]:
        if self.kind == "etcd":
            # Pods share the host's loopback, so a bare `etcd` listens on the pod IP instead.
            return [
                "etcd",
                f"--listen-client-urls=http://{pod_ip}:2379",
                f"--advertise-client-urls=http://{pod_ip}:2379",
                f"--listen-peer-urls=http://{pod_ip}:2380",
                f"--initial-advertise-peer-urls=http://{pod_ip}:2380",
                f"--initial-cluster=default=http://{pod_ip}:2380",
            ]
        return list(self.default_args)

    def executable(self, name: str) -> str:
        base = os.path.basename(name)
        if self.kind == "etcd" and base in ETCD_TOOLS and self.bin_dir:
            return str(self.bin_dir / base)
        if self.kind == "operator" and PYTHON_NAMES.match(base):
            return sys.executable
        return name


def resolve(image: str, testbin: pathlib.Path) -> ImageRuntime:
    ref = parse_reference(image)
    if ref.name == "etcd":
        return _etcd(image, ref, testbin)
    if ref.name == "etcd-operator":
        return _operator()
    if ref.repository in (
        "busybox",
        "library/busybox",
        "docker.io/library/busybox",
        "docker.io/busybox",
        "index.docker.io/library/busybox",
    ):
        return ImageRuntime("busybox", (), ("sh",), HOST_PATH)
    raise UnknownImage(
        f'image "{image}" is not in the node agent\'s image map (etcd, etcd-operator, '
        f"busybox; see e2e/nodeagent/README.md)"
    )


def _etcd(image: str, ref: Reference, testbin: pathlib.Path) -> ImageRuntime:
    match = ETCD_VERSION.match(ref.tag or "")
    if not match:
        raise UnknownImage(f'etcd image "{image}" has no version tag (like v3.5.35)')
    minor = f"{match.group(1)}.{match.group(2)}"
    recipe = PINNED_PATCHES.get(f"{minor}.{match.group(3)}", f"etcd-{minor}")
    bin_dir = testbin / recipe
    if not (bin_dir / "etcd").exists():
        raise UnknownImage(f'etcd {minor} is not built in the testbin ({bin_dir}); image "{image}"')
    return ImageRuntime(
        "etcd",
        (),
        ("etcd",),
        f"{bin_dir}:{HOST_PATH}",
        bin_dir=bin_dir,
        env=(("ETCDCTL_API", "3"),),
    )


def _operator() -> ImageRuntime:
    venv_bin = str(pathlib.Path(sys.executable).parent)
    return ImageRuntime(
        "operator",
        (sys.executable, "-m", "etcd_operator"),
        (),
        f"{venv_bin}:{HOST_PATH}",
        env=(("PYTHONPATH", str(REPO_ROOT)), ("PYTHONUNBUFFERED", "1")),
        pod_ip_env=("HEALTH_ADDRESS",),  # its health server binds 0.0.0.0 otherwise
    )
