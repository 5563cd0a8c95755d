"""The what-if replay (evlog.report.whatif) on small graphs whose answer is worked out by hand in each
test: a chain, a fan-out, a fan-in, a diamond, a queue of root-ish tasks, threads sharing a GIL, and
the pools' list schedule. Times in seconds here, ns in the model."""
from __future__ import annotations

import pytest

from evlog.report.whatif import Graph, Node, Params, list_schedule, replay, rootish_groups
from evlog.report.whatif_run import curve_workers, parse_shape

S = 1e9
MB = 1_000_000


def node(key, seconds, deps=(), **kw):
    return Node(key, seconds * S, list(deps), **kw)


def run(nodes, workers, threads=1, latency=0.0, bandwidth=100 * MB, transfer_latency=0.0, tail=0.0):
    return replay(Graph(nodes, tail * S), workers, threads, Params(latency * S, bandwidth, transfer_latency * S))


def secs(x: float) -> float:
    return round(x / S, 6)


def test_a_chain_takes_its_tasks_and_a_latency_per_task_on_any_number_of_workers():
    chain = [node("a", 1), node("b", 2, [0]), node("c", 3, [1])]
    for workers in (1, 4):
        r = run(chain, workers, latency=0.1, tail=0.5)
        # each task starts 0.1 s after its dependency ends (the first 0.1 s after its release at 0)
        assert secs(r.makespan) == 6.3 and secs(r.wall) == 6.8
        assert len(set(r.worker)) == 1  # a dependent goes where its dependency is
        assert r.limited_by == "critical path"
        assert secs(r.limits["critical path"]) == 6.0 and secs(r.limits["scheduler latency"]) == 0.3


def test_a_fan_out_stays_on_the_worker_holding_its_input_and_threads_share_the_gil():
    # a root, then 4 children; every child's only candidate is the root's worker (decide_worker), so
    # a second worker gets nothing (work stealing is not modelled)
    def graph(cpu):
        return [node("root", 1)] + [node(f"child-{k}", 1, [0], group="child", cpu=cpu, priority=k) for k in range(4)]

    assert secs(run(graph(0.0), 2).makespan) == 5.0  # 1 + 4 x 1 on one thread
    assert set(run(graph(0.0), 2).worker) == {0}
    # two threads: the children two at a time, off the CPU: 1 + 2 x 1
    assert secs(run(graph(0.0), 1, threads=2).makespan) == 3.0
    # all on the CPU: two together run at half speed, as slow as one thread: 1 + 2 x 2
    assert secs(run(graph(1.0), 1, threads=2).makespan) == 5.0
    # six children: three pairs of 2 s; the chain back from the last: two children that waited for a
    # thread (the workers: 1 s alone each, 1 s more each for the GIL), one that did not and the root
    r = replay(Graph([node("root", 1)] + [node(f"child-{k}", 1, [0], group="child", cpu=1.0, priority=k)
                                          for k in range(6)]), 1, 2, Params())
    assert secs(r.makespan) == 7.0 and r.limited_by == "the GIL"
    assert {k: secs(v) for k, v in r.limits.items() if v} == {"the GIL": 3.0, "workers": 2.0, "critical path": 2.0}
    # half on the CPU: two together need the GIL 100% of the time: no slow-down yet
    assert secs(run(graph(0.5), 1, threads=2).makespan) == 3.0
    # 0.75 each: together they need 150%, so both run at 1/1.5: each pair takes 1.5 s
    assert secs(run(graph(0.75), 1, threads=2).makespan) == 4.0


def test_a_fan_in_fetches_its_inputs_from_the_other_workers_in_parallel():
    # 4 roots of 1 s with 50 MB results, at 100 MB/s; round-robin puts one on each of 4 workers; the
    # final task goes to the first worker (all lack 150 MB and hold 50 MB: a tie) and fetches the other
    # three results at once: 0.5 s + the transfer latency 0.01 s
    roots = [node(f"load-{k}", 1, nbytes=50 * MB, group="load") for k in range(4)]
    r = run(roots + [node("final", 1, [0, 1, 2, 3])], 4, transfer_latency=0.01)
    assert sorted(r.worker[:4]) == [0, 1, 2, 3] and r.worker[4] == 0
    assert secs(r.makespan) == 2.51
    assert secs(r.limits["transfers"]) == 0.51 and secs(r.limits["critical path"]) == 2.0
    # on 2 workers: two roots each (1 + 1 s); the final fetches the other worker's 100 MB: 1 s
    r = run(roots + [node("final", 1, [0, 1, 2, 3])], 2)
    assert secs(r.makespan) == 4.0 and secs(r.limits["transfers"]) == 1.0


def test_a_diamond_runs_its_middle_on_one_worker_with_one_thread_and_in_parallel_with_two():
    diamond = [node("a", 1), node("b", 2, [0], priority=1), node("c", 1, [0], priority=2), node("d", 1, [1, 2])]
    # a 0.1-1.1; b and c both go to a's worker: b 1.2-3.2 (first by priority), c 3.2-4.2 (on b's
    # thread, no latency: it was already there); d 4.3-5.3
    r = run(diamond, 2, latency=0.1)
    assert secs(r.makespan) == 5.3
    assert [secs(x) for x in r.start] == [0.1, 1.2, 3.2, 4.3]
    assert secs(r.limits["workers"]) == 1.0  # c waited for b's thread: c's 1 s counts to the workers
    assert secs(r.limits["critical path"]) == 4.0 and secs(r.limits["scheduler latency"]) == 0.3
    # two threads: b and c together from 1.2; d waits for b: 3.3-4.3
    r = run(diamond, 1, threads=2, latency=0.1)
    assert secs(r.makespan) == 4.3 and r.limited_by == "critical path"


def test_root_ish_tasks_queue_on_the_scheduler_and_a_spare_slot_hides_the_latency():
    # 8 tasks of one group on 2 x 1 thread: root-ish (8 > 2 x 2 threads); each worker gets
    # ceil(1.1 x 1) = 2 at once, then one more each time one ends: the next is always there already,
    # so only the first pays the latency: 0.1 + 4 x 1
    loads = [node(f"load-{k}", 1, group="load", priority=k) for k in range(8)]
    assert rootish_groups(Graph(loads), 2) == {"load"} and rootish_groups(Graph(loads), 4) == set()
    r = run(loads, 2, latency=0.1)
    assert secs(r.makespan) == 4.1
    assert r.limited_by == "workers"
    assert [r.worker.count(w) for w in (0, 1)] == [4, 4]
    # on 8 workers: not root-ish any more, one each
    assert secs(run(loads, 8, latency=0.1).makespan) == 1.1


def test_pools_are_a_list_schedule():
    calls = [3.0, 1.0, 1.0, 1.0, 2.0]
    assert list_schedule(calls, 1) == (8.0, 4)
    # 2 processes: the first runs 3 (0-3), the second 1, 1, 1 (0-3); the fifth waits for either: 3-5
    assert list_schedule(calls, 2) == (5.0, 4)
    assert list_schedule(calls, 5) == (3.0, 0)
    # with 0.5 between two calls of a process: the second is free at 1.5, 3.0 and 4.5, the first at
    # 3.5: the fifth runs 3.5-5.5 on it
    assert list_schedule(calls, 2, gap=0.5) == (5.5, 4)
    assert list_schedule([], 3) == (0.0, -1)


@pytest.mark.parametrize("text, words", [
    ("workers=0", "workers=0 is not a whole number of at least 1"),
    ("workers=x", "workers=x is not a whole number of at least 1"),
    ("threads=2", "threads=T needs workers=N"),
    ("cores=4", "unknown key 'cores'"),
    ("workers=2,workers=3", "workers given twice"),
    ("workers=2,processes=2", "processes=N is a pool shape, alone"),
    ("4", "'4' is not KEY=N"),
    ("workers=", "workers= is not a whole number"),
])
def test_bad_shapes_are_named(text, words):
    with pytest.raises(ValueError) as e:
        parse_shape(text)
    assert words in str(e.value) and repr(text) in str(e.value)


def test_good_shapes():
    s = parse_shape("workers=4, threads=2")
    assert (s.workers, s.threads, s.processes) == (4, 2, None)
    s = parse_shape("processes=3")
    assert (s.workers, s.threads, s.processes) == (None, None, 3)


def test_the_curve_goes_to_twice_the_recorded_workers():
    assert curve_workers(1) == [1, 2]
    assert curve_workers(3) == [1, 2, 3, 4, 5, 6]
    xs = curve_workers(50)
    assert xs[0] == 1 and xs[-1] == 100 and 50 in xs and len(xs) <= 17


def test_a_worker_warms_up_once_and_hands_its_thread_from_task_to_task():
    # the worker starts nothing until 0.5 s after its first task came (0.1 s after the release):
    # a 0.6-1.6, b ready at 1.6, there at 1.7: 1.7-2.7
    chain = [node("a", 1), node("b", 1, [0])]
    r = replay(Graph(chain), 1, 1, Params(latency=0.1 * S, warm_up=0.5 * S))
    assert [secs(x) for x in r.start] == [0.6, 1.7] and secs(r.makespan) == 2.7
    # a root, then two children: the first starts on the idle thread as it arrives (1), the second
    # waits on the worker and takes the thread 0.05 s after the first ends: 2.05-3.05
    fan = [node("root", 1), node("c-0", 1, [0], priority=0), node("c-1", 1, [0], priority=1)]
    r = replay(Graph(fan), 1, 1, Params(hand_off=0.05 * S))
    assert [secs(x) for x in r.start] == [0.0, 1.0, 2.05] and secs(r.makespan) == 3.05
