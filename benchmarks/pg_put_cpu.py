"""CPU per single ``.delay()`` on the PostgreSQL store (issue 35), in this checkout: the client process's
(``time.process_time``) and the server backend's (utime + stime from ``/proc``: the server must run on this
machine), for a put in its own transaction and one inside ``transaction.atomic()``; one line of medians.

    uv run --group bench python benchmarks/pg_put_cpu.py
    for i in 1 2 3; do for d in . /tmp/base; do (cd $d && uv run --group bench python \\
        "$OLDPWD/benchmarks/pg_put_cpu.py"); done; done   # A/B against another checkout, alternating

CPU moves much less than a rate when other work shares the cores (docs/benchmarks.md, "PostgreSQL single
path"). The database ``qm_put_cpu`` on the server of ``--url`` is made and dropped.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path.cwd()  # the checkout measured (this script may be another's)
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from peers_postgres import fresh_database  # noqa: E402  (benchmarks/ is not a package)

TICK = os.sysconf("SC_CLK_TCK")


def backend_cpu(pid: int) -> float:
    """The server backend's user + system CPU seconds so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--calls", type=int, default=1000, help="calls per round")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    with fresh_database(args.url, "qm_put_cpu") as url:
        os.environ["BENCH_PG_URL"] = url
        os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.bench_project.pg_settings"
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connection, transaction

        from benchmarks.bench_project.bench_app import tasks
        from queue_max_django.conf import get_queue

        call_command("migrate", verbosity=0)
        queue, delay = get_queue(), tasks.noop.delay

        def in_atomic() -> None:
            with transaction.atomic():
                delay()

        delay()
        own_pid = queue._store.db.connection().info.backend_pid  # type: ignore[attr-defined]
        connection.ensure_connection()
        cases = {"own": (delay, own_pid), "atomic": (in_atomic, connection.connection.info.backend_pid)}
        for call, _pid in cases.values():
            for _ in range(200):  # warm: statements prepared
                call()
        figures: dict[str, list[tuple[float, float, float]]] = {name: [] for name in cases}
        for _ in range(args.rounds):
            for name, (call, pid) in cases.items():
                server, client, began = backend_cpu(pid), time.process_time(), time.perf_counter()
                for _ in range(args.calls):
                    call()
                figures[name].append(
                    (
                        (time.process_time() - client) / args.calls * 1e6,
                        (backend_cpu(pid) - server) / args.calls * 1e6,
                        (time.perf_counter() - began) / args.calls * 1e6,
                    )
                )
        parts = [ROOT.name]
        for name, rows in figures.items():
            client_us, server_us, wall_us = (statistics.median(column) for column in zip(*rows, strict=True))
            parts.append(f"{name}: client {client_us:.0f} server {server_us:.0f} wall {wall_us:.0f} us")
        print(" | ".join(parts), f"| load {os.getloadavg()[0]:.2f}", flush=True)
        queue.close()


if __name__ == "__main__":
    main()
