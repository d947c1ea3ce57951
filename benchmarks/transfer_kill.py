"""``queue_transfer`` over 100,000 jobs, SIGKILLed at random points of the move and run again until it
finishes; then every job is checked to be in exactly one store, once, as it was put (the suite's
``tests/django/test_transfer_kill.py`` does the same over 3,000 jobs; both use tests/django/transfer_kill.py).

    uv run --group bench python benchmarks/transfer_kill.py                      # LMDB -> PostgreSQL
    uv run --group bench python benchmarks/transfer_kill.py --reverse            # PostgreSQL -> LMDB
    uv run --group bench python benchmarks/transfer_kill.py --jobs 20000 --kills 5

The PostgreSQL side is a new database on the tests' server (tests/pgserver.py: ``QUEUE_MAX_TEST_PG`` or a
throwaway cluster), dropped at the end; the LMDB side is a temporary directory of 6 shards.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

from tests.django.transfer_kill import check, fill, run_with_kills
from tests.pgserver import close_server, drop_database, fresh_database


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--reverse", action="store_true", help="PostgreSQL -> LMDB")
    args = parser.parse_args()
    url = fresh_database()
    try:
        with tempfile.TemporaryDirectory() as folder:
            lmdb = {"STORE": "lmdb", "DATA_DIR": str(Path(folder) / "lmdb"), "SHARDS": 6}
            pg = {"STORE": "postgresql", "URL": url}
            source, target = (pg, lmdb) if args.reverse else (lmdb, pg)
            started = time.monotonic()
            expected = fill(source, args.jobs, seed=args.seed)
            filled = time.monotonic() - started
            outcome = run_with_kills(source, target, args.kills, seed=args.seed, batch=args.batch)
            started = time.monotonic()
            problems = check(source, target, expected)
            print(json.dumps({
                "direction": f"{source['STORE']} -> {target['STORE']}", "jobs": len(expected),
                "kills": outcome.kills, "runs": outcome.runs, "move_seconds": round(outcome.seconds, 1),
                "fill_seconds": round(filled, 1), "check_seconds": round(time.monotonic() - started, 1),
                "last_run": outcome.last_report, "problems": problems[:20],
            }, indent=2))  # fmt: skip
            sys.exit(1 if problems else 0)
    finally:
        drop_database(url)
        close_server()


if __name__ == "__main__":
    main()
