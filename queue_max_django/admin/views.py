"""The admin pages over the store: the dashboard, the list of each state, a job's page, and the actions.

``JobAdmin`` is registered for the unmanaged ``Job`` model (models.py) and replaces its URLs with these
views, each wrapped by ``admin_site.admin_view`` (staff login, CSRF, no caching) and checking Django's own
permissions: view for every URL, actions included (a confirmation page lists jobs and a success message
counts what a filter matched, so without view there is nothing, only 403), then change to retry or cancel
a waiting job, ``cancel_job`` to cancel a running one, and delete to delete; change counts as view, as
everywhere in Django's admin. State changes are POST only, go through a confirmation page when they touch
more than the one job on screen, and end in a redirect with a message.

The pages only read the store, so they open it with ``get_queue(create=False)``: where the settings' LMDB
directory holds no store, every page answers 503 with the reason ("no store at PATH") and creates nothing.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Callable
from functools import update_wrapper
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, re_path, reverse

from .. import conf
from ..conf import NoStore
from ..engine import InvalidJob, Job, Queue, QueueCorrupted, State
from ..models import Job as JobModel
from ..tasks import registry
from .lazy import lazy_module

if TYPE_CHECKING:
    from . import actions, dashboard, display, listing, pausing, payloads, workflows
else:  # run on the first page served, not when Django starts (every process imports this module then)
    actions, dashboard, display, listing, pausing, payloads, workflows = (
        lazy_module(f"{__package__}.{name}")
        for name in ("actions", "dashboard", "display", "listing", "pausing", "payloads", "workflows")
    )


def get_queue() -> Queue:
    """The store, never created here: ``NoStore`` where there is none (each page then answers 503)."""
    return conf.get_queue(create=False)


STATE_PATTERN = "|".join(state.value for state in State)
PREVIEW_SIZE = 20  # jobs listed on a confirmation page
FINISHED_LABELS = {State.DONE: "Finished", State.FAILED: "Failed"}
UNFINISHED = (State.PENDING, State.SCHEDULED, State.RUNNING)  # a job page refreshes itself while in these


if TYPE_CHECKING:  # django-stubs makes ModelAdmin generic; Django's class takes no subscript
    ModelAdmin = admin.ModelAdmin[JobModel]
else:
    ModelAdmin = admin.ModelAdmin


class JobAdmin(ModelAdmin):
    """The queue's pages under ``admin/queue_max_django/job/``; the index entry opens the dashboard."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def get_urls(self) -> list[URLPattern]:
        def wrap(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
            def viewing(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
                self._require(request, "view")  # every page and every action: no view, no content
                try:
                    return view(request, *args, **kwargs)
                except NoStore as exc:
                    return self._no_store(request, exc)

            return self.admin_site.admin_view(update_wrapper(viewing, view))

        name = f"{self.opts.app_label}_{self.opts.model_name}"
        return [
            path("", wrap(self.dashboard_view), name=f"{name}_changelist"),
            path("panels/", wrap(self.panels_view), name=f"{name}_panels"),
            path("queues/pause/", wrap(self.pause_view), name=f"{name}_pause"),
            path("queues/resume/", wrap(self.resume_view), name=f"{name}_resume"),
            re_path(rf"^(?P<state>{STATE_PATTERN})/$", wrap(self.list_view), name=f"{name}_list"),
            re_path(rf"^(?P<state>{STATE_PATTERN})/action/$", wrap(self.action_view), name=f"{name}_action"),
            path("<int:job_id>/", wrap(self.job_view), name=f"{name}_job"),
            re_path(
                r"^(?P<job_id>[0-9]+)/(?P<action>retry|cancel|enqueue|run)/$",
                wrap(self.job_action_view),
                name=f"{name}_job_action",
            ),
            path("workflow/<int:workflow_id>/", wrap(self.workflow_view), name=f"{name}_workflow"),
            re_path(
                r"^workflow/(?P<workflow_id>[0-9]+)/(?P<action>cancel|retry_failed)/$",
                wrap(self.workflow_action_view),
                name=f"{name}_workflow_action",
            ),
        ]

    def workflow_view(self, request: HttpRequest, workflow_id: int) -> HttpResponse:
        return workflows.workflow_view(self, request, int(workflow_id))

    def workflow_action_view(self, request: HttpRequest, workflow_id: str, action: str) -> HttpResponse:
        return workflows.workflow_action_view(self, request, int(workflow_id), action)

    # ------------------------------------------------------------------ helpers

    def _url(self, view: str, *args: Any, query: dict[str, str] | None = None) -> str:
        url = reverse(
            f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_{view}", args=args
        )
        query = {key: value for key, value in (query or {}).items() if value}
        return f"{url}?{urlencode(query)}" if query else url

    def _no_store(self, request: HttpRequest, exc: NoStore) -> HttpResponse:
        """The page of a ``DATA_DIR`` without a store: the reason, as an error message; 503."""
        messages.error(request, str(exc))
        context = {**self.admin_site.each_context(request), "opts": self.opts, "title": "Queue: no store"}
        return TemplateResponse(request, "queue_max_django/admin/base.html", context, status=503)

    def _require(self, request: HttpRequest, permission: str) -> None:
        allowed = {
            "view": self.has_view_permission,
            "change": self.has_change_permission,
            "delete": self.has_delete_permission,
            "cancel": self.has_cancel_permission,
            "pause": self.has_pause_permission,
        }[permission](request)
        if not allowed:
            raise PermissionDenied

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        """May cancel a running job (``queue_max_django.cancel_job``): its worker is asked to stop it."""
        return request.user.has_perm(f"{self.opts.app_label}.cancel_job")

    def has_pause_permission(self, request: HttpRequest) -> bool:
        """May pause and resume queues (``queue_max_django.pause_queue``): admin/pausing.py."""
        return request.user.has_perm(f"{self.opts.app_label}.pause_queue")

    def pause_view(self, request: HttpRequest) -> HttpResponse:
        self._require(request, "pause")
        return pausing.pause_view(self, request, get_queue())

    def resume_view(self, request: HttpRequest) -> HttpResponse:
        self._require(request, "pause")
        return pausing.resume_view(self, request, get_queue())

    def _context(self, request: HttpRequest, title: str, **extra: Any) -> dict[str, Any]:
        return {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": title,
            "labels": {state.value: label for state, label in listing.LABELS.items()},
            "dashboard_url": self._url("changelist"),
            "sharded": get_queue().shard_count > 1,  # the shard filter, column and table: only then
            **extra,
        }

    def _render(self, request: HttpRequest, template: str, context: dict[str, Any]) -> TemplateResponse:
        return TemplateResponse(request, f"queue_max_django/admin/{template}", context)

    def _allowed_actions(self, request: HttpRequest, state: State) -> list[dict[str, str]]:
        permitted = {
            "change": self.has_change_permission(request),
            "delete": self.has_delete_permission(request),
            "cancel": self.has_cancel_permission(request),
        }
        return [
            {"name": action, "verb": actions.VERBS[action][0]}
            for action in actions.STATE_ACTIONS[state]
            if permitted[actions.PERMISSION[action]]
        ]

    # ------------------------------------------------------------------ the dashboard

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        context = self._context(request, "Queue dashboard", **self._panels(request))
        context["panels_url"] = self._url("panels")
        return self._render(request, "dashboard.html", context)

    def panels_view(self, request: HttpRequest) -> HttpResponse:
        """The dashboard's panels alone: what its refresh control fetches and swaps in."""
        return self._render(
            request, "dashboard_panels.html", self._context(request, "", **self._panels(request))
        )

    def _panels(self, request: HttpRequest) -> dict[str, Any]:
        now = time.time()
        data = dashboard.snapshot(get_queue(), now)
        data["now"] = display.when(now)
        data.update(pausing.rows(get_queue(), data["queues"]), can_pause=self.has_pause_permission(request))
        data.update(pause_url=self._url("pause"), resume_url=self._url("resume"))
        return data

    # ------------------------------------------------------------------ lists

    def list_view(self, request: HttpRequest, state: str) -> HttpResponse:
        current = State(state)
        queue = get_queue()
        filters = listing.Filters.from_query(request.GET, decrypt=payloads.may_read(request))
        order = request.GET.get("o", "")
        by_failed_at = order in (listing.FAILED_NEWEST, listing.FAILED_OLDEST)
        if order not in listing.ORDERS or (by_failed_at and current is not State.FAILED):
            order, by_failed_at = listing.INDEX_FIRST, False
        after = request.GET.get("after") or None
        try:
            page = listing.page(queue, current, filters, after=after, order=order, size=listing.PAGE_SIZE)
        except listing.ListingMoved:
            messages.warning(request, "The job this page went on from is gone; back to the first page.")
            return HttpResponseRedirect(self._url("list", state, query={**filters.as_query(), "o": order}))
        base = {**filters.as_query(), "o": order}
        id_order = listing.INDEX_LAST if order == listing.INDEX_FIRST else listing.INDEX_FIRST
        failed_order = listing.FAILED_OLDEST if order == listing.FAILED_NEWEST else listing.FAILED_NEWEST
        label = listing.LABELS[current]
        count = listing.count_for_page(queue, current, filters, page, first=after is None)
        now = time.time()
        context = self._context(
            request,
            label.capitalize(),
            state=current.value,
            label=label,
            filters=filters,
            order=order,
            index_order=listing.INDEX_ORDER[current],
            page=page,
            rows=[
                (job, display.short(job.payload), _list_times(current, job), _running_for(job, now))
                for job in map(payloads.listed, page.jobs)  # an encrypted job's data: "(encrypted)"
            ],
            listed_by=_listed_by(current, order, filters),
            id_sort_url=self._url("list", state, query={**filters.as_query(), "o": id_order}),
            failed_sort_url=self._url("list", state, query={**filters.as_query(), "o": failed_order}),
            count=count,
            total=listing.counted(current, listing.Count(queue.stats()[current.value])),
            count_noun=listing.noun(current, count),
            plural=listing.NOUNS[current][1],
            first_url=self._url("list", state, query=base) if after else None,
            next_url=self._url("list", state, query={**base, "after": page.next_after or ""}),
            has_next=page.next_after is not None,
            clear_url=self._url("list", state),
            action_url=self._url("action", state),
            actions=self._allowed_actions(request, current),
            sidebar=self._sidebar(queue, current, filters, order),
            shard_numbers=range(queue.shard_count),
            scan_limit=f"{listing.PAGE_SCAN_LIMIT:,}",
            facet_limit=f"{listing.FACET_SCAN_LIMIT:,}",
            by_failed_at=by_failed_at,
            show_next=page.next_after is not None and (by_failed_at or not page.cut_short),
            page_size=listing.PAGE_SIZE,
        )
        return self._render(request, "job_list.html", context)

    def _sidebar(self, queue: Queue, state: State, filters: listing.Filters, order: str) -> dict[str, Any]:
        """The list's filters by task, queue and (dead letters) error type, as Django's changelist sidebar:
        each value a link with its count, the chosen one marked; "All" drops that filter."""
        facets = listing.facets(queue, state, known_tasks=registry.names())
        groups = [("task", "task", facets.tasks), ("queue", "queue", facets.queues)]
        if state is State.FAILED:
            groups.append(("error type", "error_type", facets.error_types))
        base = {**filters.as_query(), "o": order}
        sidebar = []
        for title, key, values in groups:
            chosen = base.get(key, "")
            choices = [{"label": "All", "url": self._url("list", state.value, query={**base, key: ""}),
                        "selected": not chosen, "count": None}]  # fmt: skip
            choices += [
                {
                    "label": facet.value,
                    "url": self._url("list", state.value, query={**base, key: facet.value}),
                    "selected": facet.value == chosen,
                    "count": facet.count,
                }
                for facet in values
            ]
            if chosen and all(facet.value != chosen for facet in values):  # chosen by URL, none seen
                choices.append(
                    {"label": chosen, "url": "", "selected": True, "count": 0 if facets.exact else None}
                )
            sidebar.append({"title": title, "key": key, "choices": choices})
        return {"groups": sidebar, "exact": facets.exact}

    # ------------------------------------------------------------------ bulk actions

    def action_view(self, request: HttpRequest, state: str) -> HttpResponse:
        """POST from a list (or a job page): show what an action would touch, and do it once confirmed."""
        if request.method != "POST":
            return HttpResponseRedirect(self._url("list", state))
        current = State(state)
        action = request.POST.get("action", "")
        if action not in actions.STATE_ACTIONS[current]:
            messages.error(request, f"No action {action!r} applies to {listing.NOUNS[current][1]}.")
            return HttpResponseRedirect(self._url("list", state))
        self._require(request, actions.PERMISSION[action])
        queue = get_queue()
        filters = listing.Filters.from_query(request.POST, decrypt=payloads.may_read(request))
        back = self._url("list", state, query=filters.as_query())
        matching_scope = request.POST.get("scope") == "matching"
        ids = [job_id for job_id in map(listing.parse_job_id, request.POST.getlist("ids")) if job_id]
        if not matching_scope and not ids:
            messages.warning(request, "No job was selected: tick the jobs to act on first.")
            return HttpResponseRedirect(back)
        if request.POST.get("confirmed") != "yes":
            return self._confirm(request, current, action, filters, ids, matching_scope)
        if matching_scope:
            as_of = _as_of(request.POST.get("as_of"), queue.now())
            if as_of is None:
                messages.error(
                    request,
                    "The confirmation did not say when it was shown (as_of must be a time, in unix seconds, "
                    "not after now): nothing was done. Ask for the action again.",
                )
                return HttpResponseRedirect(back)
            outcome, note = self._act_on_matching(request, current, action, filters, as_of)
        else:
            outcome, note = actions.apply(queue, action, ids, state=current, by=_who(request)), ""
        self._log_actions(request, outcome)
        messages.success(request, outcome.message() + note)
        return HttpResponseRedirect(back)

    def _confirm(
        self,
        request: HttpRequest,
        state: State,
        action: str,
        filters: listing.Filters,
        ids: list[int],
        matching_scope: bool,
    ) -> HttpResponse:
        queue = get_queue()
        if matching_scope:
            how_many = listing.count(queue, state, filters)
            preview = listing.page(queue, state, filters, after=None, order="", size=PREVIEW_SIZE).jobs
        else:
            found = [job for job in map(queue.job, ids) if job is not None and job.state is state]
            how_many = listing.Count(len(found))
            preview = found[:PREVIEW_SIZE]
            ids = [job.job_id for job in found]
        verb = actions.VERBS[action][0]
        context = self._context(
            request,
            f"{verb} {how_many} {'job' if how_many.value == 1 and how_many.exact else 'jobs'}?",
            state=state.value,
            label=listing.LABELS[state],
            action=action,
            verb=verb,
            how_many=how_many,
            matching_scope=matching_scope,
            filters=filters,
            ids=ids,
            preview=preview,
            as_of=repr(queue.now()),  # the store's clock, as the times it keeps (PostgreSQL: the server's)
            back_url=self._back_url(request, state, filters),
            list_url=self._url("list", state.value),
            plural=listing.NOUNS[state][1],
            danger=action in (actions.DELETE, actions.CANCEL, actions.CANCEL_RUNNING),  # the red button
            action_url=self._url("action", state.value),
            scan_limit=f"{listing.SCAN_LIMIT:,}",
        )
        return self._render(request, "confirm_action.html", context)

    def _back_url(self, request: HttpRequest, state: State, filters: listing.Filters) -> str:
        """Where "No, take me back" goes: the job's page if the action was asked for there, else the list."""
        job_id = listing.parse_job_id(request.POST.get("from_job"))
        if job_id is not None:
            return self._url("job", job_id)
        return self._url("list", state.value, query=filters.as_query())

    def _act_on_matching(
        self, request: HttpRequest, state: State, action: str, filters: listing.Filters, as_of: float
    ) -> tuple[actions.Outcome, str]:
        """Act on every job that matched when the confirmation page was shown (``as_of``, unix seconds):
        jobs that failed or were enqueued after it are left alone."""
        queue = get_queue()
        if action == actions.DELETE and state is State.FAILED and not filters.active:
            return actions.purge_failed(queue, failed_before=as_of, now=queue.now()), ""
        scan = listing.Scan()

        def stamp(job: Job) -> float:
            return job.finished_at or 0.0 if state is State.FAILED else job.enqueued_at

        ids = [
            job.job_id for job in listing.matching(queue, state, filters, scan=scan) if stamp(job) <= as_of
        ]
        note = ""
        if scan.stopped_after is not None:
            note = (
                f" Only the first {listing.SCAN_LIMIT:,} jobs were looked at: more may match, run the action "
                f"again."
            )
        return actions.apply(queue, action, ids, state=state, by=_who(request)), note

    def _log_actions(self, request: HttpRequest, outcome: actions.Outcome) -> None:
        """Django's admin log (``LogEntry``, the "Recent actions" box and each object's history): one entry
        per job a cancel changed, by this user, now."""
        message = actions.LOGGED.get(outcome.action)
        if message is None:
            return
        for job_id in outcome.changed:
            self.log_change(request, self.model(pk=job_id), message)

    # ------------------------------------------------------------------ one job

    def _job_or_404(self, job_id: Any) -> Job:
        parsed = listing.parse_job_id(job_id)
        job = None if parsed is None else get_queue().job(parsed)
        if job is None:
            raise Http404(f"There is no job {job_id} (any more): it finished long ago, or was deleted.")
        return job

    def job_view(self, request: HttpRequest, job_id: int) -> HttpResponse:
        try:
            job = self._job_or_404(job_id)
        except QueueCorrupted as exc:  # its record on disk does not decode: say so, never a 500
            messages.error(request, f"Job {job_id} cannot be read: {exc}. Run manage.py queue_check.")
            return HttpResponseRedirect(self._url("changelist"))
        job, sealing = payloads.shown(self, request, job)  # an encrypted job's: masked, or opened and logged
        label = listing.LABELS[job.state]
        can_change = self.has_change_permission(request)
        context = self._context(
            request,
            f"Job {job.job_id}",
            job=job,
            sealing=sealing,
            state=job.state.value,
            label=label,
            state_label=listing.JOB_LABELS[job.state],
            arguments=display.arguments(job.payload, job.name),
            result=display.as_json(job.result) if job.state is State.DONE else None,
            metadata=display.as_json(job.metadata) if job.metadata else None,
            attempts=display.attempts(job),
            error_box=display.error_box(job),
            cancelled=display.cancelled(job),
            running_for=_running_for(job, time.time()),
            times=[
                ("Enqueued", display.when(job.enqueued_at)),
                ("Due" if job.state is State.SCHEDULED else "Ready at", display.when(job.eta)),
                ("Started", display.when(job.started_at)),
                ("Lease until", display.when(job.lease_until)),
                (FINISHED_LABELS.get(job.state, "Last finished"), display.when(job.finished_at)),
            ],
            list_url=self._url("list", job.state.value),
            can_retry=job.state is State.FAILED and can_change and not job.corrupted,
            can_cancel=job.state in (State.PENDING, State.SCHEDULED) and can_change,
            can_cancel_running=job.state is State.RUNNING and self.has_cancel_permission(request),
            cancel_requested=job.state is State.RUNNING and get_queue().cancel_requested(job.job_id),
            can_delete=job.state is State.FAILED and self.has_delete_permission(request),
            can_enqueue=job.state is State.DONE and can_change and not job.damage,
            can_run=job.state is State.SCHEDULED and can_change,
            run_url=self._url("job_action", job.job_id, "run"),
            retry_url=self._url("job_action", job.job_id, "retry"),
            enqueue_url=self._url("job_action", job.job_id, "enqueue"),
            state_action_url=self._url("action", job.state.value),
            finished=job.state not in UNFINISHED,
            refreshable=job.state in UNFINISHED,  # the page refreshes itself until the job finishes
            auto_refresh=job.state in (State.PENDING, State.RUNNING),  # (a scheduled one: on request)
            panel_url=self._url("job", job.job_id, query={"panel": "1"}),
            workflow_url=None if (flow := listing.workflow_of(job)) is None else self._url("workflow", flow),
        )
        return self._render(
            request, "job_panel.html" if request.GET.get("panel") else "job_detail.html", context
        )

    def job_action_view(self, request: HttpRequest, job_id: str, action: str) -> HttpResponse:
        """Retry, cancel, run now or enqueue again the job whose page the button was on; then back to that
        page (or its list, or the new job's page)."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        self._require(request, actions.PERMISSION[action])
        parsed = listing.parse_job_id(job_id)
        try:
            job = None if parsed is None else get_queue().job(parsed)
        except QueueCorrupted as exc:
            messages.error(request, f"Job {job_id} cannot be read: {exc}. Nothing was done.")
            return HttpResponseRedirect(self._url("changelist"))
        if job is None:
            messages.error(request, f"There is no job {job_id} (any more): nothing was done.")
            return HttpResponseRedirect(self._url("changelist"))
        if action == actions.ENQUEUE:
            return self._enqueue_again(request, job)
        fits = action in actions.STATE_ACTIONS[job.state]
        outcome = actions.apply(
            get_queue(), action, [job.job_id] if fits else [], state=job.state, by=_who(request)
        )
        self._log_actions(request, outcome)
        if outcome.corrupted:
            messages.error(
                request,
                f"Job {job.job_id} was quarantined as corrupted: its data did not decode, so nothing is left "
                f"to run and it cannot be retried. Nothing was done; read it, then delete it.",
            )
            return HttpResponseRedirect(self._url("job", job.job_id))
        if not outcome.done:
            messages.warning(
                request,
                f"Job {job.job_id} is {listing.IS[job.state]}: "
                f"{actions.VERBS[action][0].lower()} does not apply to it, nothing was done.",
            )
            return HttpResponseRedirect(self._url("job", job.job_id))
        messages.success(request, f"{actions.VERBS[action][1]} job {job.job_id}.")
        if action == actions.CANCEL:  # the job is gone: back to the list it was on
            return HttpResponseRedirect(self._url("list", job.state.value))
        return HttpResponseRedirect(self._url("job", job.job_id))

    def _enqueue_again(self, request: HttpRequest, job: Job) -> HttpResponse:
        """A done job's "Enqueue again": a new waiting job like it; then that job's page."""
        if job.state is not State.DONE or job.damage:
            messages.warning(
                request,
                f"Job {job.job_id} is {listing.IS[job.state]}: only a done job can be enqueued again, "
                f"nothing was done.",
            )
            return HttpResponseRedirect(self._url("job", job.job_id))
        try:
            new_id = actions.enqueue_again(get_queue(), job)
        except InvalidJob as exc:
            messages.error(request, f"Job {job.job_id} cannot be enqueued again: {exc}. Nothing was done.")
            return HttpResponseRedirect(self._url("job", job.job_id))
        messages.success(request, f"Enqueued job {job.job_id} again as job {new_id}.")
        return HttpResponseRedirect(self._url("job", new_id))


def _as_of(value: str | None, now: float) -> float | None:
    """The time a confirmation page was shown, as its form sends it back: a finite number of unix seconds
    not after ``now``; None for anything else (missing, not a number, nan, an infinity, the future), which
    would make "all matching" reach jobs the page never counted (``inf``: every one, however new)."""
    try:
        as_of = float(value or "")
    except ValueError:
        return None
    return as_of if math.isfinite(as_of) and 0 <= as_of <= now else None


def _list_times(state: State, job: Job) -> list[dt.datetime | None]:
    """The time columns of a list row: when it failed or finished, is due, started and holds its lease
    until, or was enqueued."""
    columns: dict[State, list[float | None]] = {
        State.PENDING: [job.enqueued_at],
        State.SCHEDULED: [job.eta],
        State.RUNNING: [job.started_at, job.lease_until],
        State.DONE: [job.finished_at],
        State.FAILED: [job.finished_at],
    }
    return [display.when(value) for value in columns[state]]


def _running_for(job: Job, now: float) -> str | None:
    """How long a running job's attempt has run, for people; None for a job in another state."""
    if job.state is not State.RUNNING or job.started_at is None:
        return None
    return display.duration(now - job.started_at)


def _listed_by(state: State, order: str, filters: listing.Filters) -> str:
    if filters.tags and order not in (listing.FAILED_NEWEST, listing.FAILED_OLDEST):
        return "job id, newest first (a search by tag lists the tag's jobs in that order)"
    if order == listing.FAILED_NEWEST:
        return "failed at, newest first"
    if order == listing.FAILED_OLDEST:
        return "failed at, oldest first"
    return listing.DIRECTIONS[state][order == listing.INDEX_LAST]


def _who(request: HttpRequest) -> str:
    """Who asks, as a cancel notes it: the admin user's name."""
    return str(request.user.get_username())
