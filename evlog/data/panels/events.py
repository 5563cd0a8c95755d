"""The events panel: the newest events of a topic (or of all), and the topics with their counts."""
from __future__ import annotations

from evlog.data.jsonsafe import finite
from evlog.data.store import Store


def events(st: Store, topic: str | None, limit: int) -> dict:
    evs = st.events(topic, limit=limit, newest_first=True)
    for e in evs:
        e["time"] /= 1e9
    return finite({"topic": topic, "events": evs,
                   "topics": [{"topic": t, "count": n} for t, n in st.topics()]})
