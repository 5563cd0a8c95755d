"""A small torchrun job on the CPU (gloo): each worker all-reduces a few tensors and records events.

    evlog-instrument torchrun --standalone --nproc_per_node=2 examples/torch_gloo.py

It runs and prints the same without evlog. Under evlog, the workers' events (evlog.bridge.record)
and metrics (torch's put_metric), the agent's worker-status events, the rendezvous events and the
agent's metrics become OTel telemetry, all in the agent's trace, each worker tagged with its ranks.

--fail-first-attempt makes every worker exit 1 in the first attempt (TORCHELASTIC_RESTART_COUNT=0):
run it with --max-restarts=1 to see a restart.
"""
import argparse
import os

import torch
import torch.distributed as dist
from torch.distributed.elastic import metrics

from evlog.bridge import record


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--fail-first-attempt", action="store_true")
    args = ap.parse_args()
    rank = int(os.environ["RANK"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))

    world = int(os.environ["WORLD_SIZE"])
    record("worker.started", event_type="train", metadata={"rank": rank, "world_size": world, "attempt": attempt})
    if args.fail_first_attempt and attempt == 0:
        # before any collective: a worker that joined gloo and left can stall the next attempt's connect
        record("worker.failing", event_type="train", metadata={"rank": rank, "attempt": attempt})
        raise SystemExit(1)

    dist.init_process_group("gloo")

    for step in range(args.steps):
        t = torch.tensor([float(rank + step)])
        dist.all_reduce(t)
        metrics.put_metric("step.count", 1, "train")
        record("step", event_type="train", metadata={"rank": rank, "step": step, "sum": t.item()})
    dist.destroy_process_group()
    print(f"rank {rank}/{world}: {args.steps} all-reduce steps done (attempt {attempt})", flush=True)


if __name__ == "__main__":
    main()
