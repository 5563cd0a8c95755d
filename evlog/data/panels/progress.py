"""Dask's progress bars: per task prefix its tasks by state, against its total."""
from __future__ import annotations

from evlog.data.store import Store

PROGRESS_STATES = ("memory", "erred", "processing", "queued", "no-worker", "waiting", "released")


def progress(store: Store) -> dict:
    """Per task prefix its tasks by state and its total, as Dask's progress bars count them.

    While a prefix has tasks the scheduler still knows (its latest ``dask.prefix.tasks`` sample, Dask's
    own ``TaskPrefix.states``), those counts: waiting, queued, processing, in memory, erred, released.
    Once they are all forgotten (or without the gauge), the task lives recorded: per key the state of
    the life that computed it."""
    live = store.prefix_states()
    done = store.progress()
    out = []
    for prefix in sorted(set(live) | set(done)):
        states = live.get(prefix) or done.get(prefix) or {}
        states = {k: v for k, v in states.items() if v and k != "forgotten"}
        out.append({"prefix": prefix, "states": states, "total": sum(states.values()),
                    "source": "scheduler" if prefix in live else "spans"})
    return {"prefixes": out, "states": list(PROGRESS_STATES)}
