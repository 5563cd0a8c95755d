"""evlog quickstart: a small program with tasks in threads and processes, and console metadata.

Run it as a user would:  evlog-instrument python examples/quickstart.py
then look at it with:    evlog view
"""
import json
import math
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

from opentelemetry import trace

tracer = trace.get_tracer("quickstart")


def work(n: int) -> float:
    return sum(math.sqrt(i) for i in range(n))


def main() -> None:
    with tracer.start_as_current_span("quickstart"):
        with ThreadPoolExecutor(max_workers=4) as pool:
            threads = list(pool.map(work, [20_000] * 8))
        with ProcessPoolExecutor(max_workers=2) as pool:
            procs = list(pool.map(work, [50_000] * 6))
        for epoch in range(1, 6):
            loss = 1.0 / epoch
            print(json.dumps({"epoch": epoch, "loss": round(loss, 4), "acc": round(1 - loss / 2, 4)}), flush=True)
    print(f"done: {len(threads)} thread tasks, {len(procs)} process tasks")


if __name__ == "__main__":
    main()
