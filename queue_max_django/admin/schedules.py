"""The admin's Schedules page (issue 34), registered for the unmanaged ``Schedule`` model (models.py): every
schedule, declared in code or kept in the store, with its state and next run; a page per schedule with its
next five runs, its last jobs (links to their pages), and its buttons (pause until, disable, enable, run
now, delete); and the add/edit form of the kept ones (scheduleform.py), which previews the next five runs
before saving.

Permissions are the model's own: ``view_schedule`` to see (``change`` counts as view, as everywhere in the
admin), ``add_schedule`` to add, ``change_schedule`` to edit, pause, resume and run now, ``delete_schedule``
to delete. A code-declared schedule can only be paused and resumed (and run now). Every change is a POST
(CSRF-checked by the admin) that ends in a redirect with a message, and writes Django's admin log.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import replace
from functools import update_wrapper
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, re_path, reverse
from django.utils import timezone

from .. import conf
from ..conf import NoStore
from ..engine import Queue, QueueError
from ..models import Schedule
from ..scheduling import editing
from ..scheduling.entries import ScheduleEntry, entries, entry, last_runs, stored_entry
from .display import when
from .scheduleform import ScheduleForm

if TYPE_CHECKING:
    ModelAdmin = admin.ModelAdmin[Schedule]
else:
    ModelAdmin = admin.ModelAdmin


def get_queue() -> Queue:
    return conf.get_queue(create=False)


def _who(request: HttpRequest) -> str:
    return f"admin user {request.user.get_username()}"


class ScheduleAdmin(ModelAdmin):
    def get_urls(self) -> list[URLPattern]:
        def wrap(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
            def viewing(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
                if not self.has_view_permission(request):
                    raise PermissionDenied
                try:
                    return view(request, *args, **kwargs)
                except NoStore as exc:
                    messages.error(request, str(exc))
                    return self._render(request, "schedule_list.html", {"title": "Schedules: no store"}, 503)

            return self.admin_site.admin_view(update_wrapper(viewing, view))

        name = f"{self.opts.app_label}_{self.opts.model_name}"
        return [
            path("", wrap(self.list_view), name=f"{name}_changelist"),
            path("add/", wrap(self.add_schedule_view), name=f"{name}_add"),
            re_path(r"^(?P<object_id>.+)/change/$", wrap(self.schedule_view), name=f"{name}_change"),
            re_path(r"^(?P<object_id>.+)/action/$", wrap(self.action_view), name=f"{name}_action"),
        ]

    # ------------------------------------------------------------------ helpers

    def _url(self, view: str, name: str | None = None) -> str:
        args = () if name is None else (quote(name),)
        return reverse(
            f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_{view}", args=args
        )

    def _render(
        self, request: HttpRequest, template: str, context: dict[str, Any], status: int = 200
    ) -> TemplateResponse:
        full = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "list_url": self._url("changelist"),
            "zone": timezone.get_current_timezone_name(),  # of every time shown
            **context,
        }
        return TemplateResponse(request, f"queue_max_django/admin/{template}", full, status=status)

    def _entry(self, queue: Queue, object_id: str) -> ScheduleEntry:
        try:
            found = entry(queue, unquote(object_id))
        except QueueError:
            found = None
        if found is None:
            raise Http404("No such schedule.")
        return found

    def _log(self, request: HttpRequest, name: str, message: str, *, added: bool = False) -> None:
        obj = Schedule(name=name)
        if added:
            self.log_addition(request, obj, message)
        else:
            self.log_change(request, obj, message)

    # ------------------------------------------------------------------ pages

    def list_view(self, request: HttpRequest) -> HttpResponse:
        now = time.time()
        rows = [
            {"entry": item, "status": item.status(now), "next": next(iter(item.next_runs(now, 1)), None),
             "until": when(item.paused_until), "url": self._url("change", item.name)}
            for item in entries(get_queue())
        ]  # fmt: skip
        return self._render(request, "schedule_list.html", {
            "title": "Schedules", "rows": rows, "can_add": self.has_add_permission(request),
            "add_url": self._url("add"),
        })  # fmt: skip

    def add_schedule_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_add_permission(request):
            raise PermissionDenied
        return self._form_page(request, None)

    def schedule_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """A kept schedule's page is its form (with change permission); a code-declared one only shows."""
        queue = get_queue()
        found = self._entry(queue, object_id)
        if not found.declared and self.has_change_permission(request):
            return self._form_page(request, found)
        if request.method == "POST":
            if found.declared:
                return HttpResponseNotAllowed(["GET"])
            raise PermissionDenied
        return self._render(request, "schedule_detail.html", self._detail(request, queue, found))

    def _detail(self, request: HttpRequest, queue: Queue, found: ScheduleEntry) -> dict[str, Any]:
        now = time.time()
        return {
            "title": f"Schedule {found.name}",
            "entry": found,
            "status": found.status(now),
            "until": when(found.paused_until),
            "changed_at": None if found.kept is None else when(found.kept.changed_at),
            "next_runs": found.next_runs(now),
            "last_runs": [{"job": job, "enqueued": when(job.enqueued_at)} for job in last_runs(queue, found)],
            "action_url": self._url("action", found.name),
            "can_change": self.has_change_permission(request),
            "can_delete": self.has_delete_permission(request) and not found.declared,
        }

    def _form_page(self, request: HttpRequest, found: ScheduleEntry | None) -> HttpResponse:
        queue = get_queue()
        name = None if found is None else found.name
        initial = {} if found is None or found.kept is None else ScheduleForm.initial_of(found.kept)
        preview: list[dt.datetime] = []
        if request.method == "POST":
            form = ScheduleForm(request.POST, initial=initial, editing_name=name)
            made = form.schedule(_who(request), queue.queues)
            if made is not None and "_preview" in request.POST:
                preview = stored_entry(replace(made, enabled=True), set()).next_runs(time.time())
            elif made is not None:
                try:
                    if found is None:
                        editing.add(queue, made)
                    else:
                        editing.edit(queue, made)
                except (editing.ScheduleError, QueueError) as exc:
                    form.add_error(None, str(exc))
                else:
                    what = "Added" if found is None else "Changed"
                    self._log(request, made.name, f"{what} schedule: {_describe(made)}.", added=found is None)
                    messages.success(request, f"{what} the schedule {made.name!r}.")
                    return HttpResponseRedirect(self._url("change", made.name))
        else:
            form = ScheduleForm(initial=initial, editing_name=name)
        context: dict[str, Any] = {
            "title": "Add schedule" if found is None else f"Schedule {found.name}",
            "form": form,
            "preview": preview,
            "adding": found is None,
        }
        if found is not None:
            context.update(self._detail(request, queue, found))
            context["title"] = f"Schedule {found.name}"
        return self._render(request, "schedule_form.html", context)

    # ------------------------------------------------------------------ actions

    def action_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        queue = get_queue()
        found = self._entry(queue, object_id)
        action = request.POST.get("action", "")
        allowed = (
            self.has_delete_permission(request) if action == "delete" else self.has_change_permission(request)
        )
        if not allowed:
            raise PermissionDenied
        back = HttpResponseRedirect(self._url("change", found.name))
        by = _who(request)
        try:
            if action == "pause":
                until = _until(request.POST.get("until", ""))
                editing.pause(queue, found.name, until=until, by=by)
                said = f"Paused until {until_text(until)}."
            elif action == "disable":
                editing.pause(queue, found.name, until=None, by=by)
                said = "Disabled (paused until resumed)."
            elif action in ("resume", "enable"):
                editing.resume(queue, found.name, by=by)
                said = "Enabled: it ticks from its next due time."
            elif action == "run":
                job_id = editing.run_now(queue, found.name)
                said = f"Ran now: job {job_id}."
            elif action == "delete":
                if request.POST.get("confirmed") != "yes":
                    return self._render(request, "schedule_confirm_delete.html", {
                        "title": "Delete schedule", "entry": found,
                        "action_url": self._url("action", found.name),
                        "back_url": self._url("change", found.name),
                    })  # fmt: skip
                editing.remove(queue, found.name)
                self._log(request, found.name, "Deleted schedule.")
                messages.success(request, f"Deleted the schedule {found.name!r}.")
                return HttpResponseRedirect(self._url("changelist"))
            else:
                messages.error(request, f"Unknown action {action!r}.")
                return back
        except (editing.ScheduleError, QueueError, ValueError) as exc:
            messages.error(request, f"Nothing was changed: {exc}")
            return back
        self._log(request, found.name, said)
        messages.success(request, f"{found.name}: {said}")
        return back


def _until(text: str) -> float:
    """The form's "pause until" (``YYYY-MM-DDTHH:MM`` in the current time zone, as the pages show times):
    unix seconds; ``ValueError`` otherwise."""
    if not text.strip():
        raise ValueError("give the time the pause ends, or disable the schedule instead")
    try:
        moment = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a time such as 2026-12-24T18:00") from None
    if moment.tzinfo is None:
        moment = timezone.make_aware(moment, timezone.get_current_timezone())
    return moment.timestamp()


def until_text(until: float) -> str:
    moment = when(until)
    if moment is None:
        return "-"
    return f"{timezone.localtime(moment):%Y-%m-%d %H:%M} ({timezone.get_current_timezone_name()})"


def _describe(made: Any) -> str:
    every = (
        f"every {made.interval:g} s"
        if made.interval is not None
        else f"cron {made.cron!r} ({made.tz or 'UTC'})"
    )
    return f"{made.task} {every}"
