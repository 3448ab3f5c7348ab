"""What each image holds, built from this machine's files, and the cached build of each.

- pause: e2e/images/pause/pause.c compiled with `gcc -static`, the one file of the image;
- etcd: the testbin binaries of each etcd recipe on a distroless-like base (no shell), as
  upstream's image lays them out (/usr/local/bin, WORKDIR /var/lib/etcd, CMD etcd);
- busybox: Debian's busybox-static with every applet linked in /bin, CMD sh;
- coredns and local-path-provisioner: their testbin builds, laid out as upstream's images;
- the operator: the archive `make image` builds (packaging/image/build.sh).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pathlib
import re
import shutil
import struct
import subprocess
from collections.abc import Callable

from images import cache, names, oci

HERE = pathlib.Path(__file__).resolve().parent
TESTBIN_RECIPES = HERE.parent / "testbin"
ETCD_TOOLS = ("etcd", "etcdctl", "etcdutl")
ETCD_MODULE = "go.etcd.io/etcd/server/v3"
HOST_CA_BUNDLE = pathlib.Path("/etc/ssl/certs/ca-certificates.crt")
BUSYBOX_BINARY = pathlib.Path("/bin/busybox")


class Missing(Exception):
    """An input of an image is not on this machine (a package or a testbin binary)."""


@dataclasses.dataclass(frozen=True)
class Recipe:
    name: str
    entries: Callable[[], list[oci.Entry]] | None = None
    config: oci.Config | None = None
    # Or an archive built by another tool (which caches it), and the name its index lacks.
    prebuilt: Callable[[], pathlib.Path] | None = None
    base_name: str | None = None
    # Nodes start without it when its inputs are not built (an etcd version `make demo` does
    # not run, built by `make testbin` for the tests); any other missing input stops them.
    optional: bool = False


def build(recipe: Recipe) -> pathlib.Path:
    """The recipe's archive, written unless one of the same inputs is cached."""
    if recipe.prebuilt:
        return recipe.prebuilt()
    entries = recipe.entries()
    inputs = {
        "name": recipe.name,
        "config": dataclasses.asdict(recipe.config),
        "entries": [entry.fingerprint() for entry in entries],
    }
    archive = cache.archive_path(recipe.name, inputs)
    if not archive.exists():
        oci.write_archive(archive, recipe.name, entries, recipe.config)
    return archive


# --- pause -------------------------------------------------------------------------------


def pause_binary() -> pathlib.Path:
    """pause.c compiled statically, cached by the source and the compiler's version."""
    source = HERE / "pause" / "pause.c"
    gcc = shutil.which("gcc")
    if not gcc:
        raise Missing("gcc is missing (apt-get install gcc libc6-dev)")
    compiler = subprocess.run([gcc, "--version"], capture_output=True, text=True, check=True).stdout
    stamp = hashlib.sha256(source.read_bytes() + compiler.encode()).hexdigest()[:12]
    binary = cache.directory() / "bin" / f"pause-{stamp}"
    if not binary.exists():
        binary.parent.mkdir(parents=True, exist_ok=True)
        partial = binary.with_name(binary.name + ".partial")
        compiled = subprocess.run(
            [gcc, "-static", "-O2", "-s", "-Wall", "-Wextra", "-Werror", "-o", str(partial), str(source)],
            capture_output=True,
            text=True,
        )
        if compiled.returncode != 0:
            raise Missing(f"gcc -static failed (is libc6-dev installed?):\n{compiled.stderr}")
        partial.replace(binary)
    return binary


def pause_entries() -> list[oci.Entry]:
    return [oci.file("pause", pause_binary())]


PAUSE = Recipe(names.PAUSE, pause_entries, oci.Config(entrypoint=("/pause",), user="65535:65535", env=()))


# --- a distroless-like base: users, name service, CA certificates, /tmp; no shell ------------

PASSWD = """root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
"""
GROUP = """root:x:0:
nobody:x:65534:
tty:x:5:
staff:x:50:
nonroot:x:65532:
"""
NSSWITCH = "hosts: files dns\nnetworks: files\n"


def distroless_base() -> list[oci.Entry]:
    entries = [
        oci.text("etc/passwd", PASSWD),
        oci.text("etc/group", GROUP),
        oci.text("etc/nsswitch.conf", NSSWITCH),
        oci.directory("tmp", mode=0o1777),
        oci.directory("root", mode=0o700),
        oci.directory("home/nonroot", mode=0o700, uid=65532, gid=65532),
    ]
    if HOST_CA_BUNDLE.exists():
        entries.append(oci.file("etc/ssl/certs/ca-certificates.crt", HOST_CA_BUNDLE, mode=0o644))
    return entries


# --- etcd --------------------------------------------------------------------------------


def testbin_dir() -> pathlib.Path:
    """Where e2e/testbin/build.sh keeps its binaries (the same rule as the script)."""
    if os.environ.get("ETCD_OPERATOR_TESTBIN"):
        return pathlib.Path(os.environ["ETCD_OPERATOR_TESTBIN"])
    base = os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
    return pathlib.Path(base) / "etcd-operator" / "testbin"


def pinned_version(recipe: str, module: str) -> str | None:
    """The version (without v) e2e/testbin/<recipe>/go.mod requires of `module`."""
    go_mod = TESTBIN_RECIPES / recipe / "go.mod"
    if not go_mod.exists():
        return None
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+v(\S+)", go_mod.read_text(), re.M)
    return match.group(1) if match else None


def testbin_binary(recipe: str, name: str) -> pathlib.Path:
    binary = testbin_dir() / recipe / name
    if not binary.exists():
        raise Missing(f"{binary} is missing: run `make testbin`")
    return binary


def etcd_recipes() -> dict[str, str]:
    """testbin recipe -> the etcd version its go.mod pins (etcd-3.5 -> 3.5.35)."""
    found = {}
    for go_mod in sorted(TESTBIN_RECIPES.glob("etcd-*/go.mod")):
        version = pinned_version(go_mod.parent.name, ETCD_MODULE)
        if version:
            found[go_mod.parent.name] = version
    return found


def etcd_entries(recipe: str) -> Callable[[], list[oci.Entry]]:
    def entries() -> list[oci.Entry]:
        binaries = testbin_dir() / recipe
        missing = [tool for tool in ETCD_TOOLS if not (binaries / tool).exists()]
        if missing:
            raise Missing(f"{binaries} lacks {', '.join(missing)}: run `make testbin`")
        return distroless_base() + [
            *(oci.file(f"usr/local/bin/{tool}", binaries / tool) for tool in ETCD_TOOLS),
            oci.directory("var/etcd"),
            oci.directory("var/lib/etcd"),
        ]

    return entries


ETCD_CONFIG = oci.Config(
    cmd=("/usr/local/bin/etcd",),
    env=(
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
    ),
    working_dir="/var/lib/etcd",
    exposed_ports=("2379/tcp", "2380/tcp"),
)


def etcd_images() -> list[Recipe]:
    return [
        Recipe(names.etcd(version), etcd_entries(recipe), ETCD_CONFIG, optional=True)
        for recipe, version in etcd_recipes().items()
    ]


# --- coredns and local-path-provisioner -----------------------------------------------------

COREDNS_MODULE = "github.com/coredns/coredns"
LOCAL_PATH_PROVISIONER_MODULE = "github.com/rancher/local-path-provisioner"
CAP_NET_BIND_SERVICE = 10
# struct vfs_cap_data, revision 2, effective: what `setcap cap_net_bind_service=+ep` writes.
NET_BIND_SERVICE_FILE_CAPABILITY = struct.pack("<IIIII", 0x02000001, 1 << CAP_NET_BIND_SERVICE, 0, 0, 0)


def coredns_entries() -> list[oci.Entry]:
    """Upstream: distroless static (nonroot), /coredns with cap_net_bind_service=+ep so that
    user 65532 may bind port 53."""
    capability = (("security.capability", NET_BIND_SERVICE_FILE_CAPABILITY),)
    return distroless_base() + [oci.file("coredns", testbin_binary("coredns", "coredns"), xattrs=capability)]


def local_path_provisioner_entries() -> list[oci.Entry]:
    """Upstream puts the binary in /usr/bin on alpine; here on the distroless-like base
    (the provisioner runs no shell itself, its helper pods run busybox's)."""
    binary = testbin_binary("local-path-provisioner", "local-path-provisioner")
    return distroless_base() + [oci.file("usr/bin/local-path-provisioner", binary)]


def addon_images() -> list[Recipe]:
    found = []
    coredns = pinned_version("coredns", COREDNS_MODULE)
    if coredns:
        found.append(
            Recipe(
                names.coredns(coredns),
                coredns_entries,
                oci.Config(
                    entrypoint=("/coredns",), user="65532:65532", working_dir="/", exposed_ports=("53/tcp", "53/udp")
                ),
            )
        )
    provisioner = pinned_version("local-path-provisioner", LOCAL_PATH_PROVISIONER_MODULE)
    if provisioner:
        found.append(
            Recipe(
                names.local_path_provisioner(provisioner),
                local_path_provisioner_entries,
                oci.Config(cmd=("local-path-provisioner",)),
            )
        )
    return found


# --- busybox -----------------------------------------------------------------------------

BUSYBOX_PASSWD = """root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
nobody:x:65534:65534:nobody:/home:/bin/false
"""
BUSYBOX_GROUP = "root:x:0:\ndaemon:x:1:\nnogroup:x:65534:\n"


def busybox_applets(binary: pathlib.Path) -> list[str]:
    listed = subprocess.run([str(binary), "--list"], capture_output=True, text=True, check=True).stdout
    return sorted({applet for applet in listed.split() if applet != "busybox"})


def busybox_entries() -> list[oci.Entry]:
    if not BUSYBOX_BINARY.exists() or not is_static(BUSYBOX_BINARY):
        raise Missing(f"{BUSYBOX_BINARY} is missing or not static (apt-get install busybox-static)")
    return [
        oci.file("bin/busybox", BUSYBOX_BINARY),
        *(oci.symlink(f"bin/{applet}", "busybox") for applet in busybox_applets(BUSYBOX_BINARY)),
        oci.text("etc/passwd", BUSYBOX_PASSWD),
        oci.text("etc/group", BUSYBOX_GROUP),
        oci.text("etc/nsswitch.conf", NSSWITCH),
        oci.directory("tmp", mode=0o1777),
        oci.directory("root", mode=0o700),
        oci.directory("home"),
        oci.directory("usr/sbin"),
        oci.directory("var"),
    ]


def is_static(path: pathlib.Path) -> bool:
    """True for a 64-bit ELF without a program interpreter (PT_INTERP): no dynamic loader."""
    with open(path, "rb") as elf:
        header = elf.read(64)
        if header[:5] != b"\x7fELF\x02":
            return False
        phoff = int.from_bytes(header[0x20:0x28], "little")
        entry_size = int.from_bytes(header[0x36:0x38], "little")
        count = int.from_bytes(header[0x38:0x3A], "little")
        elf.seek(phoff)
        table = elf.read(entry_size * count)
    return all(int.from_bytes(table[i : i + 4], "little") != 3 for i in range(0, len(table), entry_size))


BUSYBOX = Recipe(
    names.BUSYBOX,
    busybox_entries,
    oci.Config(cmd=("sh",), env=("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)),
)


# --- the operator ------------------------------------------------------------------------


def operator_archive() -> pathlib.Path:
    """`make image`'s archive (built unless cached). Its layout names the image by tag only."""
    script = HERE.parent.parent / "packaging" / "image" / "build.sh"
    built = subprocess.run([str(script)], capture_output=True, text=True)
    if built.returncode != 0:
        raise Missing(f"packaging/image/build.sh failed:\n{built.stderr[-2000:]}")
    return pathlib.Path(built.stdout.strip().splitlines()[-1])


OPERATOR = Recipe(names.OPERATOR, prebuilt=operator_archive, base_name=oci.split_reference(names.OPERATOR)[0])


def all_recipes() -> list[Recipe]:
    return [PAUSE, *etcd_images(), BUSYBOX, *addon_images(), OPERATOR]
