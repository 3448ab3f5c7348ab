"""tests/support/shared_release.py: the chart's release shared by make test's two real-node
runs, each run here a process of its own (flock and the user files are per process)."""

from __future__ import annotations

import multiprocessing
import subprocess
import threading

from tests.support.shared_release import SharedRelease


def test_the_first_live_user_installs_and_the_last_uninstalls(tmp_path):
    calls: list[str] = []
    other = subprocess.Popen(["sleep", "60"])  # another run, alive
    try:
        (tmp_path / "release-users").mkdir()
        (tmp_path / "release-users" / str(other.pid)).touch()
        release = SharedRelease(tmp_path)
        assert release.join(lambda: calls.append("install")) is False
        release.leave(lambda: calls.append("uninstall"))
        assert calls == [], "a run left while another still used the release"
    finally:
        other.kill()
        other.wait()
    # That run is gone now: its file is stale, and the next run installs afresh.
    release = SharedRelease(tmp_path)
    assert release.join(lambda: calls.append("install")) is True
    release.leave(lambda: calls.append("uninstall"))
    assert calls == ["install", "uninstall"]
    assert list((tmp_path / "release-users").iterdir()) == []


def _keep(root, kept, done):
    with SharedRelease(root).release_kept():
        kept.set()
        done.wait(60)


def test_a_test_that_disturbs_the_release_waits_for_another_runs_test_that_relies_on_it(tmp_path):
    context = multiprocessing.get_context("fork")
    kept, done = context.Event(), context.Event()
    other = context.Process(target=_keep, args=(tmp_path, kept, done))
    other.start()
    try:
        assert kept.wait(30)
        release = SharedRelease(tmp_path)
        taken = threading.Event()
        taker = threading.Thread(target=lambda: (release.take_the_release(), taken.set()), daemon=True)
        taker.start()
        assert not taken.wait(1.0), "the release was taken while another run's test relied on it"
        done.set()
        assert taken.wait(30)
        # Held now: another run's test that relies on the release waits in its turn.
        kept.clear()
        done.clear()
        second = context.Process(target=_keep, args=(tmp_path, kept, done))
        second.start()
        assert not kept.wait(1.0), "another run relied on the release while it was taken"
        release.give_the_release_back()
        assert kept.wait(30)
        done.set()
        second.join(30)
    finally:
        done.set()
        other.join(30)


def _join_and_install(root, installing, installed, done):
    release = SharedRelease(root)
    release.join(lambda: (installing.set(), installed.wait(60)))
    done.wait(60)


def test_a_run_joining_while_the_first_installs_relies_on_the_release_only_once_it_is_installed(tmp_path):
    context = multiprocessing.get_context("fork")
    installing, installed, done = context.Event(), context.Event(), context.Event()
    first = context.Process(target=_join_and_install, args=(tmp_path, installing, installed, done))
    first.start()
    try:
        assert installing.wait(30)
        release = SharedRelease(tmp_path)
        kept, joined = threading.Event(), []

        def join_and_keep():
            joined.append(release.join(lambda: None))
            with release.release_kept():
                kept.set()

        threading.Thread(target=join_and_keep, daemon=True).start()
        assert not kept.wait(1.0), "relied on the release while the first run was installing it"
        installed.set()
        assert kept.wait(30)
        assert joined == [False], "the first run is a live user: nothing to install"
    finally:
        installed.set()
        done.set()
        first.join(30)
