"""Where a chord's members spend their time on LMDB, in the engine alone: N plain jobs put in one shard
against a chord of N members (and its callback), each drained in this process by ``get_many(256)`` and
``ack_many`` until empty, alternating, ``--rounds`` times.

    uv run --group bench python benchmarks/workflow_lock.py
    uv run --group bench python benchmarks/workflow_lock.py --n 20000 --rounds 5

Printed per side (medians over the rounds): CPU µs per job of the claims and of the acknowledgements, and
the µs per job spent inside the shard's write transactions (``Env.write``, its commit included) for each.
A workflow lives in one shard (docs/architecture.md#workflows), so with several worker processes that
time is what they queue for: the time of a wide workflow's drain cannot be less than the sum of it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from queue_max_django.engine import Queue, QueueEmpty  # noqa: E402
from queue_max_django.engine.stores.lmdb.env import Env  # noqa: E402
from queue_max_django.engine.workflowing import Step  # noqa: E402

_inside = [0.0]  # seconds inside Env.write since the last reset


def _timed_write(original: Any) -> Any:
    def write(self: Env, fn: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return original(self, fn, **kwargs)
        finally:
            _inside[0] += time.perf_counter() - began

    return write


def drain(kind: str, n: int) -> dict[str, float]:
    """Put (untimed) and drain one side in a fresh 6-shard store. -> µs per job of each part."""
    with tempfile.TemporaryDirectory() as tmp:
        queue = Queue(tmp + "/store", shards=6)
        try:
            if kind == "plain":
                queue.put_many_to_shard(0, [[i] for i in range(n)], name="noop")
            else:
                steps = [Step(f"m{i}", [i], {"name": "noop"}) for i in range(n)]
                steps.append(Step("callback", [], {"name": "collect"}, parents=tuple(range(n))))
                queue.workflows.put(steps)
            claim_cpu = ack_cpu = claim_in = ack_in = 0.0
            done = 0
            while True:
                _inside[0], cpu = 0.0, time.process_time()
                try:
                    records = queue.get_many(256, 0)
                except QueueEmpty:
                    break
                claim_cpu += time.process_time() - cpu
                claim_in += _inside[0]
                _inside[0], cpu = 0.0, time.process_time()
                queue.ack_many([(record, None) for record in records])
                ack_cpu += time.process_time() - cpu
                ack_in += _inside[0]
                done += len(records)
        finally:
            queue.close()
    scale = 1e6 / done
    return {"claim_cpu": claim_cpu * scale, "ack_cpu": ack_cpu * scale, "claim_in": claim_in * scale,
            "ack_in": ack_in * scale}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    Env.write = _timed_write(Env.write)  # type: ignore[method-assign]
    runs: dict[str, list[dict[str, float]]] = {"plain": [], "chord": []}
    for _ in range(args.rounds):
        for kind in runs:
            runs[kind].append(drain(kind, args.n))
    print(f"{args.n:,} jobs a side, {args.rounds} rounds, medians, µs per job")
    print(f"  {'side':28} {'claim CPU':>10} {'ack CPU':>10} {'claim in txn':>13} {'ack in txn':>11}")
    for kind, label in (("plain", "plain jobs in one shard"), ("chord", "a chord's members")):
        middle = {key: statistics.median(run[key] for run in runs[kind]) for key in runs[kind][0]}
        cpu = f"{middle['claim_cpu']:10.2f} {middle['ack_cpu']:10.2f}"
        print(f"  {label:28} {cpu} {middle['claim_in']:13.2f} {middle['ack_in']:11.2f}")


if __name__ == "__main__":
    main()
