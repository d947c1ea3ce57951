"""The admin's workflow page: a workflow's status, its nodes (state, job link, job state, parents, error),
its edges drawn (``workflow_graph.py``: up to ``MAX_DRAWN`` nodes) and listed, and two buttons: cancel
(what waits is cancelled, running nodes get a cancel request) and retry failed (the dead-lettered nodes and
what waited on them start again). View to see it; change to cancel or retry, as for one job (cancelling
its running nodes also asks for ``cancel_job``).

The views are ``JobAdmin``'s (views.py routes ``workflow/<id>/`` here); they read the store as every page
does, and a job's page links here when the job is a node of a workflow (``listing.workflow_of``).
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect

from .. import conf
from ..engine import Queue, State
from ..engine.workflows import NodeState, Status
from . import display
from .workflow_graph import MAX_DRAWN, graph_svg

JobAdmin = Any  # views.JobAdmin (which imports this module): its _url, _context, _render, _require

STATE_LABELS = {
    NodeState.WAITING: "waiting on parents",
    NodeState.QUEUED: "queued",
    NodeState.SUCCEEDED: "succeeded",
    NodeState.FAILED: "failed",
    NodeState.CANCELLED: "cancelled",
}
ACTIONS = ("cancel", "retry_failed")


def workflow_view(admin: JobAdmin, request: HttpRequest, workflow_id: int) -> HttpResponse:
    queue = conf.get_queue(create=False)
    info = queue.workflows.get(workflow_id)
    if info is None:
        raise Http404(f"no workflow {workflow_id} is stored")
    names = [node.name for node in info.nodes]
    rows = []
    for node in info.nodes:
        job = queue.job(node.job_id) if node.job_id is not None else None
        rows.append({
            "name": node.name, "state": node.state.value, "label": STATE_LABELS[node.state],
            "job_id": node.job_id, "job_state": None if job is None else job.state.value,
            "job_url": None if job is None else admin._url("job", node.job_id),
            "parents": [names[parent] for parent in node.parents], "always": node.always, "error": node.error,
        })  # fmt: skip
    edges = [(names[parent], node.name) for node in info.nodes for parent in node.parents]
    status = info.status
    can_change = admin.has_change_permission(request)
    context = admin._context(
        request,
        f"Workflow {workflow_id}",
        workflow=info,
        created=display.when(info.created_at),
        status=status.value,
        rows=rows,
        edges=edges,
        graph=graph_svg(info.nodes),
        max_drawn=MAX_DRAWN,
        jobs_url=admin._url("list", "done", query={"workflow": str(workflow_id)}),
        can_cancel=status is Status.RUNNING and can_change,
        can_retry=status is Status.FAILED and can_change,
        cancel_url=admin._url("workflow_action", workflow_id, "cancel"),
        retry_url=admin._url("workflow_action", workflow_id, "retry_failed"),
    )
    response: HttpResponse = admin._render(request, "workflow_detail.html", context)
    return response


def workflow_action_view(
    admin: JobAdmin, request: HttpRequest, workflow_id: int, action: str
) -> HttpResponse:
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    admin._require(request, "change")
    queue = conf.get_queue(create=False)
    info = queue.workflows.get(workflow_id)
    if info is None:
        raise Http404(f"no workflow {workflow_id} is stored")
    if action == "cancel":
        running = [node for node in info.nodes if node.state is NodeState.QUEUED and node.job_id is not None]
        if any(_job_running(queue, node.job_id) for node in running):
            admin._require(request, "cancel")  # its running nodes are asked to stop: as for one running job
        reached = queue.workflows.cancel(workflow_id, by=str(request.user.get_username()))
        messages.success(
            request, f"Cancelled workflow {workflow_id}: {reached} node(s) cancelled or asked to stop."
        )
    else:
        started = queue.workflows.retry_failed(workflow_id)
        if started:
            messages.success(request, f"Retried workflow {workflow_id}: {started} node(s) start again.")
        else:
            messages.warning(
                request, f"Workflow {workflow_id} has no failed node to retry: nothing was done."
            )
    return HttpResponseRedirect(admin._url("workflow", workflow_id))


def _job_running(queue: Queue, job_id: int | None) -> bool:
    job = None if job_id is None else queue.job(job_id)
    return job is not None and job.state is State.RUNNING
