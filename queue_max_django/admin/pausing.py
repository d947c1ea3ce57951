"""The dashboard's pause and resume buttons (``Queue.pause``/``resume``), behind the ``pause_queue``
permission (models.py): a queue's row of the queues table pauses it (for a chosen time, with a reason), the
"Paused" table lists every pause in force (who, since, until, why) with a button to resume it, and a form
under it pauses one task of a queue. Each is a POST (CSRF-checked by the admin) that ends in a redirect to
the dashboard with a message, and writes Django's admin log (who paused or resumed what, when).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect

from ..coordination import pausing
from ..engine import Pause, Queue, QueueError
from .display import when


class JobAdmin(Protocol):
    """What of the admin (views.py's ``JobAdmin``) these views use."""

    model: Any

    def _url(self, view: str, *args: Any, query: dict[str, str] | None = None) -> str: ...

    def log_change(self, request: HttpRequest, obj: Any, message: Any) -> Any: ...


# The durations the pause form offers: (value of the form, label); "" pauses until resumed.
DURATIONS = [
    ("", "until resumed"),
    ("15m", "15 minutes"),
    ("1h", "1 hour"),
    ("4h", "4 hours"),
    ("1d", "1 day"),
]


@dataclass(frozen=True)
class PauseRow:
    """One pause in force, as the dashboard shows it."""

    pause: Pause

    @property
    def target(self) -> str:
        return f"task {self.pause.task} in {self.pause.queue}" if self.pause.task else self.pause.queue

    @property
    def since(self) -> Any:
        return when(self.pause.paused_at)

    @property
    def until(self) -> Any:
        return None if self.pause.until is None else when(self.pause.until)


def rows(queue: Queue, queues: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The dashboard's pause data: every pause in force; and each row of the queues table (``queues``,
    name -> counts) gets ``paused``, its queue's own pause (None: not paused whole)."""
    pauses = queue.pauses()
    whole = {pause.queue: PauseRow(pause) for pause in pauses if pause.task is None}
    for name, counts in queues.items():
        counts["paused"] = whole.get(name)
    return {"pauses": [PauseRow(pause) for pause in pauses], "pause_durations": DURATIONS}


def _target(request: HttpRequest) -> tuple[str, str | None]:
    return request.POST.get("queue", ""), request.POST.get("task", "").strip() or None


def pause_view(admin: JobAdmin, request: HttpRequest, queue: Queue) -> HttpResponse:
    """Pause the POSTed ``queue`` (and ``task``) for ``duration`` with ``reason``, as this user."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    name, task = _target(request)
    back = HttpResponseRedirect(admin._url("changelist"))
    try:
        raw = request.POST.get("duration", "").strip()
        duration = pausing.parse_duration(raw) if raw else None
        reason = request.POST.get("reason", "").strip() or None
        (made,) = queue.pause(name, task=task, duration=duration, reason=reason, by=_who(request))
        warned = pausing.warnings(queue, [name], task)
    except (ValueError, QueueError) as exc:  # InvalidJob, UnknownQueue are ValueErrors; a bad duration too
        messages.error(request, f"Nothing was paused: {exc}")
        return back
    what = PauseRow(made).target
    ends = when(made.until)
    until = "until resumed" if ends is None else f"until {ends:%Y-%m-%d %H:%M:%S} UTC"
    admin.log_change(request, admin.model(pk=f"queue {what}"), f"Paused {until}: {reason or 'no reason'}.")
    for text in warned:
        messages.warning(request, text)
    messages.success(request, f"Paused {what} {until}: workers take none of its jobs; running ones finish.")
    return back


def resume_view(admin: JobAdmin, request: HttpRequest, queue: Queue) -> HttpResponse:
    """Resume the POSTed ``queue`` (and ``task``)."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    name, task = _target(request)
    try:
        lifted = queue.resume(name, task=task)
    except QueueError as exc:
        messages.error(request, f"Nothing was resumed: {exc}")
        return HttpResponseRedirect(admin._url("changelist"))
    what = f"task {task} in {name}" if task else name
    if lifted:
        admin.log_change(request, admin.model(pk=f"queue {what}"), "Resumed.")
        messages.success(request, f"Resumed {what}: workers take its jobs again.")
    else:
        messages.warning(request, f"{what} was not paused (any more): nothing to resume.")
    return HttpResponseRedirect(admin._url("changelist"))


def _who(request: HttpRequest) -> str:
    return f"admin user {request.user.get_username()}"
