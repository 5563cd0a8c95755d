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
