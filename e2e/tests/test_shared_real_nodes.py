"""The two pytest runs of `make test` share one real-node instance: it comes up once, and the
check of `down` (the chart's run) is the one that takes it down, even when the other run ends
while that check waits for it."""

from __future__ import annotations

import threading
import types

import pytest

from tests.support import shared_real_nodes


class Instance:
    def __init__(self):
        self.running, self.ups, self.downs, self.up_calls = False, 0, 0, 0

    def up(self, where):
        self.up_calls += 1
        if not self.running:
            self.running, self.ups = True, self.ups + 1

    def down(self, where):
        self.running, self.downs = False, self.downs + 1
        return []


@pytest.fixture
def instance(monkeypatch):
    fake = Instance()
    monkeypatch.setattr(shared_real_nodes.controlplane, "up", fake.up)
    monkeypatch.setattr(shared_real_nodes.controlplane, "down", fake.down)
    monkeypatch.setattr(shared_real_nodes.controlplane, "apiserver_ready", lambda where: fake.running)
    monkeypatch.setattr(shared_real_nodes.hoststate, "snapshot", lambda: {"links": ["as found"]})
    return fake


def test_the_instance_comes_up_once_and_the_first_run_records_the_host(instance, tmp_path):
    first = shared_real_nodes.SharedUse(tmp_path, None).start()
    second = shared_real_nodes.SharedUse(tmp_path, None).start()
    assert (first.started_here, second.started_here, instance.ups) == (True, False, 1)
    assert second.host_before() == {"links": ["as found"]}


def test_a_run_that_joins_during_another_runs_node_fault_leaves_the_nodes_as_they_are(instance, tmp_path):
    chart = shared_real_nodes.SharedUse(tmp_path, None).start(faults_first=True)  # a node stopped meanwhile
    operators = shared_real_nodes.SharedUse(tmp_path, None).start()
    assert (operators.started_here, instance.up_calls) == (False, 1), "the joining run ran `up`, which heals nodes"
    chart.give_the_nodes_back()


def test_a_run_holding_the_nodes_keeps_them_without_waiting_on_itself(instance, tmp_path):
    chart = shared_real_nodes.SharedUse(tmp_path, None).start(faults_first=True)
    kept = threading.Event()

    def test_after_the_faults_in_the_same_run():
        with chart.nodes_kept():
            kept.set()

    threading.Thread(target=test_after_the_faults_in_the_same_run, daemon=True).start()
    assert kept.wait(5), "the run waited for its own hold on the nodes"
    chart.give_the_nodes_back()


def test_a_run_ending_while_the_down_check_waits_leaves_the_instance_to_it(instance, tmp_path):
    operators = shared_real_nodes.SharedUse(tmp_path, None).start()  # brought it up
    chart = shared_real_nodes.SharedUse(tmp_path, None).start()
    only_user = threading.Event()

    def down_check():
        chart.wait_until_only_user()
        only_user.set()

    waiting = threading.Thread(target=down_check)
    waiting.start()
    assert not only_user.wait(0.5), "the check went on while the other run still used the instance"

    operators.end()
    waiting.join(10)
    assert only_user.is_set()
    assert instance.downs == 0 and instance.running, "the other run took the instance from under the check"
    chart.end()
    assert instance.downs == 0  # the check itself takes it down


def test_the_last_run_to_end_takes_the_instance_down(instance, tmp_path):
    first = shared_real_nodes.SharedUse(tmp_path, None).start()
    second = shared_real_nodes.SharedUse(tmp_path, None).start()
    first.end()
    assert instance.downs == 0
    second.end()
    assert instance.downs == 1 and not instance.running


def test_a_node_fault_waits_for_the_running_test_and_goes_before_the_next(instance, tmp_path):
    operators = shared_real_nodes.SharedUse(tmp_path, None).start()
    chart = shared_real_nodes.SharedUse(tmp_path, None).start()
    order: list[str] = []
    fault_waits, fault_done = threading.Event(), threading.Event()

    def node_fault():
        fault_waits.set()
        with chart.nodes_to_itself():
            order.append("node fault")
        fault_done.set()

    def next_test():
        with operators.nodes_kept():
            order.append("next test")

    with operators.nodes_kept():
        with operators.nodes_kept():  # a module's hold and its test's, in one run
            fault = threading.Thread(target=node_fault)
            fault.start()
            fault_waits.wait(5)
            assert not fault_done.wait(0.5), "a node was faulted while a test worked on the nodes"
        order.append("test")
    following = threading.Thread(target=next_test)
    following.start()
    fault.join(10)
    following.join(10)
    assert order == ["test", "node fault", "next test"]
    # Each run reports what the locks cost it: the fault waited for the test (at least the
    # half second the test checked it was held off), and held the nodes to itself.
    assert chart.waits_to_fault == 1 and chart.waited_to_fault >= 0.5, chart.lock_report()
    assert chart.held_to_itself > 0 and "held the nodes to itself" in chart.lock_report()
    assert operators.waits_to_fault == 0 and operators.held_to_itself == 0.0


def test_consecutive_node_faults_hold_the_nodes_once_and_give_them_back_before_the_next_test(instance, tmp_path):
    from tests.support import real_nodes_fixtures

    operators = shared_real_nodes.SharedUse(tmp_path, None).start()
    chart = shared_real_nodes.SharedUse(tmp_path, None).start()
    fault_1, fault_2 = (types.SimpleNamespace(fixturenames=["nodes_to_the_module"]) for _ in range(2))
    fault_3 = types.SimpleNamespace(fixturenames=["real_nodes", "nodes_to_the_test"])
    other = types.SimpleNamespace(fixturenames=["real_nodes"])
    worked_on_the_nodes = threading.Event()

    def other_runs_test():
        with operators.nodes_kept():
            worked_on_the_nodes.set()

    def teardown(item, nextitem):
        hook = real_nodes_fixtures.pytest_runtest_teardown(item, nextitem)
        next(hook)
        with pytest.raises(StopIteration):
            hook.send(None)

    real_nodes_fixtures._USE["use"] = chart
    try:
        chart.take_the_nodes()  # the first faulting module's setup
        waiting = threading.Thread(target=other_runs_test)
        waiting.start()
        for item, nextitem in ((fault_1, fault_2), (fault_2, fault_3)):
            teardown(item, nextitem)
            chart.take_the_nodes()  # the next one's setup: it holds them already
            with chart.nodes_to_itself():
                pass  # a block inside the hold keeps it
            assert not worked_on_the_nodes.wait(0.3), "another run's test worked on the nodes between two faults"
        teardown(fault_3, other)
        waiting.join(10)
        assert worked_on_the_nodes.is_set(), "the nodes stayed held after the last node fault"
        assert chart.waits_to_fault == 0 and chart.held_to_itself >= 0.6, chart.lock_report()
        assert operators.waits_for_faults == 1, operators.lock_report()
    finally:
        real_nodes_fixtures._USE.pop("use", None)
        chart.give_the_nodes_back()


def test_a_run_that_faults_first_takes_the_nodes_before_it_joins_and_the_others_wait_for_its_faults(instance, tmp_path):
    operators = shared_real_nodes.SharedUse(tmp_path, None).start()  # joined first, its first test not yet begun
    chart = shared_real_nodes.SharedUse(tmp_path, None).start(faults_first=True)
    assert chart.waits_to_fault == 0, chart.lock_report()
    worked_on_the_nodes = threading.Event()

    def other_runs_test():
        with operators.nodes_kept():
            worked_on_the_nodes.set()

    waiting = threading.Thread(target=other_runs_test)
    waiting.start()
    assert not worked_on_the_nodes.wait(0.5), "another run's test worked on the nodes before the faults ran"
    chart.give_the_nodes_back()  # after the last faulting test (real_nodes_fixtures' teardown hook)
    waiting.join(10)
    assert worked_on_the_nodes.is_set()
    assert operators.waits_for_faults == 1, operators.lock_report()
    chart.end()
    operators.end()
