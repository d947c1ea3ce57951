"""procrastinate's side of benchmarks/peers_postgres.py: an App on $BENCH_PG_URL with the no-op task (async,
as procrastinate's own examples write it: a sync task would run in a thread)."""

from __future__ import annotations

import os

import procrastinate

app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=os.environ.get("BENCH_PG_URL", "")))


@app.task(name="noop")
async def noop(**_kwargs: object) -> None:
    return None
