"""The images import into a real containerd (a throwaway one, its own root and socket) and
run under runc: pause waits and stops on SIGTERM, etcd has no shell, busybox has one."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from images import containerd, names, recipes

pytestmark = [
    pytest.mark.needs_containerd,
    pytest.mark.lane2,
    pytest.mark.skipif(
        not (shutil.which("containerd") and shutil.which("ctr") and shutil.which("runc")),
        reason="needs containerd, ctr and runc (apt-get install containerd runc)",
    ),
    pytest.mark.skipif(os.geteuid() != 0, reason="a throwaway containerd runs as root"),
]


@pytest.fixture(scope="module")
def node():
    # A short base: the socket path must fit in 108 bytes.
    base = pathlib.Path(tempfile.mkdtemp(prefix="ctd-", dir="/tmp"))
    try:
        with containerd.Throwaway(base) as throwaway:
            yield throwaway
    finally:
        shutil.rmtree(base, ignore_errors=True)


def imported(node, recipe: recipes.Recipe) -> str:
    containerd.import_archive(node.socket, recipes.build(recipe), recipe.base_name)
    assert recipe.name in containerd.image_names(node.socket)
    return recipe.name


def wait_for(condition, timeout: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def task_row(node, task: str) -> list[str]:
    """`ctr tasks ls` columns of one task: name, host PID, status (empty when absent)."""
    rows = [line.split() for line in containerd.ctr(node.socket, "tasks", "ls").splitlines()[1:]]
    return next((row for row in rows if row and row[0] == task), [])


def test_pause_runs_as_its_user_and_exits_zero_on_sigterm(node):
    image = imported(node, recipes.PAUSE)
    started = started_task(node, image, "pause-test")
    try:
        wait_for(lambda: task_row(node, "pause-test")[-1:] == ["RUNNING"], what="the pause task")
        assert ids(task_row(node, "pause-test")[1]) == ("65535", "65535")
        containerd.ctr(node.socket, "tasks", "kill", "--signal", "SIGTERM", "pause-test")
        assert started.wait(timeout=30) == 0
    finally:
        if started.poll() is None:
            started.kill()


def started_task(node, image: str, task: str) -> subprocess.Popen:
    return subprocess.Popen(
        ["ctr", "--address", str(node.socket), "-n", containerd.NAMESPACE, "run", "--rm", image, task],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def ids(pid: str) -> tuple[str, str]:
    """The real uid and gid of a host process."""
    status = dict(line.split(":", 1) for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines())
    return status["Uid"].split()[0], status["Gid"].split()[0]


def test_coredns_binds_port_53_as_nonroot_through_its_file_capability(node):
    recipe = next(
        (recipe for recipe in recipes.addon_images() if recipe.name.startswith(names.COREDNS_REPOSITORY)), None
    )
    if recipe is None or not (recipes.testbin_dir() / "coredns" / "coredns").exists():
        pytest.skip("no coredns testbin build (make testbin)")
    image = imported(node, recipe)
    started = started_task(node, image, "coredns-test")
    try:
        output = []
        while not any("CoreDNS-" in line or "denied" in line for line in output):
            line = started.stdout.readline()
            assert line, f"coredns stopped: {''.join(output)}"
            output.append(line)
        assert ".:53\n" in output, output  # with no Corefile: the whoami server on port 53
        assert ids(task_row(node, "coredns-test")[1]) == ("65532", "65532")
        containerd.ctr(node.socket, "tasks", "kill", "--signal", "SIGTERM", "coredns-test")
        assert started.wait(timeout=30) == 0
    finally:
        if started.poll() is None:
            started.kill()


def test_etcd_images_run_their_binaries_and_have_no_shell(node):
    recipe = next(recipe for recipe in recipes.etcd_images() if recipe.name == names.etcd("3.6.16"))
    image = imported(node, recipe)
    version = node.run(image, "etcd-version", "etcd", "--version")
    assert version.returncode == 0 and "etcd Version: 3.6.16" in version.stdout, version
    shell = node.run(image, "etcd-shell", "/bin/sh", "-c", "true")
    assert shell.returncode != 0


def test_busybox_runs_its_shell_on_a_read_only_root(node):
    image = imported(node, recipes.BUSYBOX)
    done = node.run(
        image, "busybox-sh", "sh", "-c", "echo hello from $(id -u); touch /x 2>/dev/null || echo ro", read_only=True
    )
    assert done.returncode == 0 and done.stdout.split() == ["hello", "from", "0", "ro"], done


@pytest.mark.skipif(
    not (shutil.which("mmdebstrap") and shutil.which("dpkg-deb")),
    reason="make image needs mmdebstrap (apt-get install mmdebstrap)",
)
def test_operator_image_imports_under_the_charts_name_and_imports_its_pod_modules_read_only(node):
    image = imported(node, recipes.OPERATOR)
    # What the operator's own pods run in this image: the operator, seed fetch, scratch_check.
    modules = "etcd_operator.runtime.operator, etcd_operator.programs.seed, etcd_operator.programs.scratch_check"
    done = node.run(
        image, "operator-import", "python", "-c", f"import os, {modules}; print(os.getuid())", read_only=True
    )
    assert done.returncode == 0 and done.stdout.strip() == "65532", done


def test_local_path_provisioner_runs_its_pinned_version(node):
    recipe = next(
        (
            recipe
            for recipe in recipes.addon_images()
            if recipe.name.startswith(names.LOCAL_PATH_PROVISIONER_REPOSITORY)
        ),
        None,
    )
    if recipe is None or not (recipes.testbin_dir() / "local-path-provisioner" / "local-path-provisioner").exists():
        pytest.skip("no local-path-provisioner testbin build (make testbin)")
    image = imported(node, recipe)
    done = node.run(image, "provisioner-version", "local-path-provisioner", "--version", read_only=True)
    assert done.returncode == 0 and done.stdout.split()[-1] == recipe.name.rsplit(":", 1)[1], done


def exec_printing(argv: list[str], attempts: int = 5) -> subprocess.CompletedProcess:
    """`ctr tasks exec` of a command that prints: ctr may exit 0 before it has copied a short
    output from the task's fifo (seen here as an empty stdout after a read that succeeded), so a
    run that exits 0 and prints nothing is run again; any output, or a failure, is returned."""
    for _ in range(attempts):
        run = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        if run.returncode != 0 or run.stdout.strip():
            return run
    return run


def test_etcd_serves_from_a_data_mount_on_a_read_only_root(node, tmp_path):
    """As in the verification pod: unix listeners in the working directory, a data dir on
    a mounted volume, the root file system read-only, the default seccomp profile."""
    recipe = next(recipe for recipe in recipes.etcd_images() if recipe.name == names.etcd("3.6.16"))
    image = imported(node, recipe)
    data = tmp_path / "volume"
    data.mkdir()
    ctr = ["ctr", "--address", str(node.socket), "-n", containerd.NAMESPACE]
    started = subprocess.Popen(
        [
            *ctr,
            "run",
            "--rm",
            "--read-only",
            "--seccomp",
            "--cwd",
            "/var/lib/etcd",
            "--mount",
            f"type=bind,src={data},dst=/var/lib/etcd,options=rbind:rw",
            image,
            "etcd-member",
            "etcd",
            "--name=m",
            "--data-dir=/var/lib/etcd/data",
            "--listen-client-urls=unix://client:0",
            "--advertise-client-urls=unix://client:0",
            "--listen-peer-urls=unix://peer:0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for(lambda: (data / "client:0").exists(), what="etcd's client socket")
        etcdctl = [*ctr, "tasks", "exec", "--exec-id"]
        endpoint = "--endpoints=unix:///var/lib/etcd/client:0"
        put = exec_printing([*etcdctl, "put", "etcd-member", "etcdctl", endpoint, "put", "k", "v"])
        assert put.stdout.strip() == "OK", put
        got = exec_printing([*etcdctl, "get", "etcd-member", "etcdctl", endpoint, "get", "k", "--print-value-only"])
        assert got.stdout.strip() == "v", got
        assert (data / "data" / "member" / "wal").is_dir()
        containerd.ctr(node.socket, "tasks", "kill", "--signal", "SIGTERM", "etcd-member")
        assert started.wait(timeout=30) == 0
    finally:
        if started.poll() is None:
            started.kill()


def test_the_readme_commands_build_every_image_and_import_them(node):
    """`make images` (docs/development.md), then `python -m images import --address <socket>`."""
    root = pathlib.Path(__file__).resolve().parents[2]
    built = subprocess.run(["make", "-s", "images"], cwd=root, capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stderr
    # make may print its own lines first (a venv being reinstalled); the images' are "name archive".
    printed = {line.split()[0] for line in built.stdout.splitlines() if line.endswith(".oci.tar")}
    assert printed == {recipe.name for recipe in recipes.all_recipes()}
    env = {**os.environ, "PYTHONPATH": str(root / "e2e")}
    loaded = subprocess.run(
        [sys.executable, "-m", "images", "import", "--address", str(node.socket), "pause", "busybox"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert loaded.returncode == 0, loaded.stderr
    assert {names.PAUSE, names.BUSYBOX} <= set(containerd.image_names(node.socket))
