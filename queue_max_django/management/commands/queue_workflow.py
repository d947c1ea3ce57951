"""``manage.py queue_workflow``: one workflow by id, its status and every node (state, job, parents)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from ...engine import Queue
from ...engine.workflows import WorkflowInfo
from ..base import QueueCommand
from ..common import engine_errors, id_text, job_id, open_queue, printable, table, to_json, when


def workflow_dict(queue: Queue, info: WorkflowInfo) -> dict[str, Any]:
    """The workflow as ``--json`` prints it: ids as str (as every command's JSON has them), each node with
    its parents by name and, once it is a job, that job's state."""
    names = [node.name for node in info.nodes]
    nodes = []
    for node in info.nodes:
        job = queue.job(node.job_id) if node.job_id is not None else None
        nodes.append({
            "name": node.name, "state": node.state.value, "job_id": id_text(node.job_id),
            "job_state": None if job is None else job.state.value,
            "parents": [names[parent] for parent in node.parents], "always": node.always, "error": node.error,
        })  # fmt: skip
    return {
        "workflow_id": id_text(info.workflow_id),
        "status": info.status.value,
        "created_at": info.created_at,
        "cancelled": info.cancelled,
        "nodes": nodes,
    }


class Command(QueueCommand):
    help = (
        "Show one workflow by id: its status (running, succeeded, failed, cancelled) and each node, with its "
        "state (waiting on parents, queued, succeeded, failed, cancelled), its job and that job's state, its "
        "parents and, for a node that failed or was cancelled, why. --json prints one JSON object."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "workflow_id", type=job_id, metavar="WORKFLOW_ID", help="The workflow's id (WorkflowResult.id)."
        )
        parser.add_argument("--json", action="store_true", help="Print one JSON object instead.")

    def handle(self, *args: Any, **options: Any) -> None:
        queue = open_queue(create=False)
        with engine_errors():
            info = queue.workflows.get(options["workflow_id"])
            if info is None:
                raise CommandError(
                    f"no workflow {options['workflow_id']} is stored (never put, or forgotten)"
                )
            data = workflow_dict(queue, info)
        if options["json"]:
            self.stdout.write(to_json(data))
            return
        rows = [
            [printable(node["name"]), "waiting on parents" if node["state"] == "waiting" else node["state"],
             node["job_id"], node["job_state"], printable(", ".join(node["parents"])) or None,
             "yes" if node["always"] else None, None if node["error"] is None else printable(node["error"])]
            for node in data["nodes"]
        ]  # fmt: skip
        cancelled = " (cancelled)" if info.cancelled else ""
        self.stdout.write(
            f"workflow {data['workflow_id']}: {data['status']}{cancelled}, put {when(info.created_at)} UTC, "
            f"{len(rows)} node(s)\n\n"
            + table(["NODE", "STATE", "JOB", "JOB STATE", "AFTER", "ALWAYS", "ERROR"], rows)
        )
