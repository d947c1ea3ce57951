"""``manage.py queue_rekey``: seal every stored job (waiting, scheduled, results, dead letters) and what the
workflows keep beside them (waiting nodes' payloads and metadata, nodes' results and errors) again under the
newest key of ``QUEUE_MAX["ENCRYPTION_KEYS"]`` (``engine/rekey.py`` does it), in batches; killed and run
again, it finishes. Says what is left under old keys. ``--json``: the report as one JSON object."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from ...encryption.keys import sealer
from ...engine.rekey import RekeyReport, rekey
from ..base import QueueCommand
from ..common import engine_errors, open_queue, positive_int, to_json

BATCH = 200


class Command(QueueCommand):
    help = (
        "Re-encrypt the stored jobs (waiting, scheduled, results, dead letters) and the workflows' nodes "
        "(waiting payloads, results, errors) under the first key of QUEUE_MAX['ENCRYPTION_KEYS'], in "
        "batches (one transaction each). Resumable: killed and run again, it finishes. Says what is left "
        "under old keys; remove an old key only once nothing is."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--batch", type=positive_int, default=BATCH, metavar="N",
                            help=f"Jobs (or nodes) read and written per transaction ({BATCH}).")  # fmt: skip
        parser.add_argument("--json", action="store_true", help="Print the report as one JSON object.")

    def handle(self, *args: Any, **options: Any) -> None:
        found = sealer()
        if found is None:
            raise CommandError("QUEUE_MAX['ENCRYPTION_KEYS'] gives no key: nothing to re-encrypt under")
        queue = open_queue(create=False)
        verbose = options["verbosity"] >= 2 and not options["json"]

        def progress(report: RekeyReport) -> None:
            self.stdout.write(
                f"batch {report.batches}: {report.resealed} job(s) and {report.nodes_resealed} workflow "
                f"node(s) re-encrypted so far"
            )
            self.stdout.flush()

        with engine_errors():
            report = rekey(
                queue._live(), found, batch=options["batch"], progress=progress if verbose else None
            )
        if options["json"]:
            self.stdout.write(to_json(report.as_dict()))
            return
        self.stdout.write(
            f"Re-encrypted {report.resealed} job(s) under key {report.key_id!r}; {report.current} already "
            f"were, {report.clear} hold nothing encrypted."
        )
        self.stdout.write(
            f"Re-encrypted {report.nodes_resealed} workflow node(s); {report.nodes_current} already were."
        )
        if report.done:
            self.stdout.write("Nothing is left under old keys: they can be removed from ENCRYPTION_KEYS.")
            return
        left = ", ".join(f"{kid!r}: {n}" for kid, n in sorted(report.left.items()))
        if left:
            self.stdout.write(f"Left under old keys (jobs): {left}.")
        nodes_left = ", ".join(f"{kid!r}: {n}" for kid, n in sorted(report.nodes_left.items()))
        if nodes_left:
            self.stdout.write(f"Left under old keys (workflow nodes): {nodes_left}.")
        if report.broken:
            shown = ", ".join(map(str, report.broken[:20]))
            self.stdout.write(
                f"{len(report.broken)} job(s) hold data that does not open (tampered, or its key is not "
                f"given): "
                f"{shown}{' ...' if len(report.broken) > 20 else ''}. Put the key back, or delete them."
            )
        if report.nodes_broken:
            shown = ", ".join(f"{wf}:{at}" for wf, at in report.nodes_broken[:20])
            self.stdout.write(
                f"{len(report.nodes_broken)} workflow node(s) (workflow:index) hold data that does not open: "
                f"{shown}{' ...' if len(report.nodes_broken) > 20 else ''}. Put the key back (after the "
                f"new one) and run queue_rekey again."
            )
        if report.changed:
            self.stdout.write(f"{report.changed} job(s) changed while read: run queue_rekey again.")
        if report.nodes_changed:
            self.stdout.write(
                f"{report.nodes_changed} workflow node(s) changed while read: run queue_rekey again."
            )
        if report.running:
            self.stdout.write(
                f"{report.running} job(s) were running and were not read: run queue_rekey again."
            )
