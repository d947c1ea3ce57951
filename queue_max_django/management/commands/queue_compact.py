"""``manage.py queue_compact``: an offline compacting copy of the store, swapped in (or written elsewhere)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from ...conf import store_class
from ...engine.stores.lmdb.compact import CompactReport, compact_store
from ..base import QueueCommand
from ..common import engine_errors, load_config, table, to_json

MIB = 1024 * 1024


def _mib(size: int) -> str:
    return f"{size / MIB:,.2f}"


class Command(QueueCommand):
    help = (
        "Compact the LMDB store offline: copy every LMDB environment without its free pages and swap the "
        "copy in (LMDB reuses freed pages but never shrinks its files), keeping the owner, group and mode of "
        "every file and folder. First removes what a killed compaction left beside the store. Refuses while "
        "any process has the store open: stop the workers, web servers and shells that use it first. Not "
        "for the PostgreSQL store, whose space autovacuum reclaims."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--output",
            metavar="PATH",
            help="Write the compacted store to PATH (which must not exist) and leave the store as it is.",
        )
        parser.add_argument(
            "--keep-backup",
            action="store_true",
            help="Keep the original store as <DATA_DIR>.pre-compact-<time> instead of deleting it.",
        )
        parser.add_argument("--json", action="store_true", help="Print the sizes as one JSON object.")

    def handle(self, *args: Any, **options: Any) -> None:
        config = load_config()
        store = store_class(config)
        if not store.offline_compact:
            raise CommandError(
                f"The {store.kind} store cannot be compacted offline: nothing was changed. queue_compact is "
                f"for the LMDB store (it rewrites LMDB's files). PostgreSQL reclaims the space of finished "
                f"and deleted jobs itself: autovacuum (the store's tables carry their own autovacuum "
                f'settings) makes it reusable while the workers run. See docs/howto/postgresql.md, "What to '
                f'monitor".'
            )
        assert config.data_dir is not None  # the LMDB store always has one
        with engine_errors():
            report = compact_store(
                config.data_dir, output=options["output"], keep_backup=options["keep_backup"]
            )
        if options["json"]:
            self.stdout.write(to_json(_as_dict(report)))
            return
        for path in report.removed:
            self.stdout.write(f"Removed {path}, left by a compaction that was killed.")
        for path in report.recovered:
            self.stdout.write(
                f"Kept {path}: the original store that a killed compaction (--keep-backup) had swapped out."
            )
        rows = [
            [
                env.name,
                env.before.file_bytes // 1024,
                env.after.file_bytes // 1024,
                env.before.last_pgno + 1,
                env.before.pages_used,
                env.after.last_pgno + 1,
            ]
            for env in report.envs
        ]
        headers = ["environment", "KiB before", "KiB after", "pages before", "pages in use", "pages after"]
        self.stdout.write(table(headers, rows))
        where = (
            "in place" if report.output == report.path else f"into {report.output} (the store is unchanged)"
        )
        self.stdout.write(
            f"Compacted {report.path} {where}: {_mib(report.bytes_before)} MiB -> {_mib(report.bytes_after)} "
            f"MiB in {report.seconds:.1f}s."
        )
        if report.backup is not None:
            self.stdout.write(f"The original store is kept at {report.backup}.")


def _as_dict(report: CompactReport) -> dict[str, Any]:
    return {
        "path": report.path,
        "output": report.output,
        "backup": report.backup,
        "bytes_before": report.bytes_before,
        "bytes_after": report.bytes_after,
        "seconds": report.seconds,
        "removed": list(report.removed),
        "recovered_backups": list(report.recovered),
        "environments": {
            env.name: {
                "bytes_before": env.before.file_bytes,
                "bytes_after": env.after.file_bytes,
                "pages_before": env.before.last_pgno + 1,
                "pages_in_use": env.before.pages_used,
                "pages_after": env.after.last_pgno + 1,
                "entries": env.after.entries,
            }
            for env in report.envs
        },
    }
