"""The process's story ledger (evlog.observed.events): bounded to the newest TRANSITIONS transitions, whatever
size the shipments come in."""
from __future__ import annotations

from evlog.observed import events


def _records(keys, t0: float) -> list:
    # as the scheduler records them: (key, start, finish, stimulus id, time, extra, info)
    return [(k, "waiting", "processing", f"s-{k}", t0 + i, "tcp://w1", None) for i, k in enumerate(keys)]


def test_a_shipment_larger_than_the_ledger_keeps_its_newest_transitions_in_order():
    events._transitions.clear()
    n = events.TRANSITIONS
    events.record_transitions(_records([f"old-{i}" for i in range(5)], 0.0))
    events.record_transitions(_records([f"k-{i}" for i in range(n + 3)], 100.0))  # one shipment past the bound
    kept = list(events._transitions)
    assert len(kept) == n
    assert kept[0][0] == "k-3" and kept[-1][0] == f"k-{n + 2}"
    assert [t.finish for t in events.story(f"k-{n + 2}")] == ["processing"]
    assert events.story("k-2") == [] and events.story("old-4") == []
    [t] = events.story("k-3")
    assert (t.start, t.finish, t.stimulus_id, t.worker, t.time) == ("waiting", "processing", "s-k-3", "tcp://w1", 103.0)
    events._transitions.clear()


def test_each_transition_names_the_worker_its_record_carries():
    events._transitions.clear()
    finished = ("tcp://w2", ("dep",), None, 8, 0, 0.5)  # extra of memory and erred: (worker, deps, error, ...)
    events.record_transitions([
        ("a", "waiting", "processing", "s1", 1.0, "tcp://w1", None),
        ("a", "processing", "memory", "s2", 2.0, finished, None),
        ("b", "processing", "erred", "s3", 3.0, finished, None),
        ("c", "processing", "erred", "s4", 4.0, None, None),  # no TaskState left to read
        ("a", "memory", "released", "s5", 5.0, None, None),
        ("d", "released", "waiting", "s6", 6.0, None, ("p", "p-1", None, None, (0,))),
    ])
    workers = {(t.key, t.finish): t.worker for k in "abcd" for t in events.story(k)}
    assert workers == {("a", "processing"): "tcp://w1", ("a", "memory"): "tcp://w2", ("a", "released"): None,
                       ("b", "erred"): "tcp://w2", ("c", "erred"): None, ("d", "waiting"): None}
    events._transitions.clear()
