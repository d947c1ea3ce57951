"""pgqueuer's side of benchmarks/peers_postgres.py: the factory pgqueuer's worker calls, an asyncpg
connection to $BENCH_PG_URL (pgqueuer's default driver) and the no-op entrypoint (async, as pgqueuer's
examples write it).

Run as a module, it is the worker: ``pgqueuer.run()``, which its docs give as "what ``pgq run`` does,
without the CLI", on uvloop as ``pgq run`` uses it, with ``--batch-size N`` and ``--drain`` (exit once the
queue is empty). ``pgq run`` itself fails with typer 0.29 (its ``--log-level`` parser hands a str where the
logging setup wants its enum)."""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import AsyncIterator

import asyncpg
import pgqueuer
from pgqueuer import PgQueuer
from pgqueuer.models import Job
from pgqueuer.types import QueueExecutionMode


@contextlib.asynccontextmanager
async def main() -> AsyncIterator[PgQueuer]:
    connection = await asyncpg.connect(os.environ["BENCH_PG_URL"])
    pgq = PgQueuer.from_asyncpg_connection(connection)

    @pgq.entrypoint("noop")
    async def noop(job: Job) -> None:
        return None

    try:
        yield pgq
    finally:
        await connection.close()


if __name__ == "__main__":
    import uvloop

    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--drain", action="store_true")
    options = parser.parse_args()
    mode = QueueExecutionMode.drain if options.drain else QueueExecutionMode.continuous
    uvloop.run(pgqueuer.run(main, batch_size=options.batch_size, mode=mode))
