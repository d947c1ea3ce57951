"""The example's page: a button that enqueues a batch, and a table of its jobs that updates itself.

The table is filled from ``jobs.json`` (polled once a second by a few lines of plain JavaScript in the
template; without JavaScript the page refreshes itself). The batch's job ids are kept in the session.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from queue_max_django.conf import get_queue

from .batch import Entry, describe, enqueue_batch

SESSION_KEY = "example_batch"


def _entries(request: HttpRequest) -> list[Entry]:
    return [Entry(kind, job_id) for kind, job_id in request.session.get(SESSION_KEY, [])]


def _state(request: HttpRequest) -> dict[str, Any]:
    queue = get_queue()
    stats = queue.stats()
    return {
        "jobs": [describe(entry) for entry in _entries(request)],
        "stats": {key: stats[key] for key in ("pending", "scheduled", "running", "done", "failed", "total")},
        "workers": len(queue.workers()),
    }


@require_GET
def index(request: HttpRequest) -> HttpResponse:
    return render(request, "example_app/index.html", _state(request))


@require_POST
def enqueue(request: HttpRequest) -> HttpResponse:
    entries = enqueue_batch()
    request.session[SESSION_KEY] = [[entry.kind, entry.job_id] for entry in entries]
    return redirect("example_app:index")


@require_GET
def jobs_json(request: HttpRequest) -> JsonResponse:
    return JsonResponse(_state(request))
