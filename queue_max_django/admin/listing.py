"""Which jobs a list page shows: the filters of its query string, bounded scans, and keyset pages.

Every read goes through the engine's keyset listing (``Queue.jobs``), so a page costs the same at any depth of
any store. The engine filters by queue and task name itself; the search text, error type and shard are
tested here, on jobs the engine hands over in batches, and a scan stops after ``SCAN_LIMIT`` jobs (the page
then offers to search further from where it stopped). Sorting dead letters by failed-at is exact: the engine
lists them by job id, so that order needs one bounded scan of (failed-at, id) pairs, never of whole jobs.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..engine import InvalidJob, Job, Queue, State
from ..engine.tags import TAG_PATTERN
from ..engine.workflows import WORKFLOW_KEY
from . import fieldsearch
from .fieldsearch import Field, field_of

PAGE_SIZE = 50
PAGE_SCAN_LIMIT = 25_000  # jobs a list page examines at most (to fill itself, or to sort by failed-at)
SCAN_LIMIT = 100_000  # jobs a count or an "all matching" action examines at most
BATCH = 500  # jobs asked of the engine at a time while scanning
FACET_SCAN_LIMIT = 2_000  # jobs a list's sidebar counts by task, queue and error type, at most (the newest)
MAX_JOB_ID = 2**64 - 1  # ids are stored as unsigned 64-bit keys; anything larger names no job
TAG_WORD = "tag:"  # a search word ``tag:T``: jobs tagged T (engine/tags.py), through the store's tag index

# How people call the states; URLs and data use the State values.
LABELS: dict[State, str] = {
    State.PENDING: "waiting",
    State.SCHEDULED: "scheduled",
    State.RUNNING: "running",
    State.DONE: "done",
    State.FAILED: "dead letters",
}
# What one job and several of a state are called in sentences ("1 dead letter", "No waiting jobs match").
NOUNS: dict[State, tuple[str, str]] = {
    State.PENDING: ("waiting job", "waiting jobs"),
    State.SCHEDULED: ("scheduled job", "scheduled jobs"),
    State.RUNNING: ("running job", "running jobs"),
    State.DONE: ("done job", "done jobs"),
    State.FAILED: ("dead letter", "dead letters"),
}
# What one job's page calls its state.
JOB_LABELS: dict[State, str] = {**LABELS, State.FAILED: "dead letter"}
# A job of each state, in "job 12 is ...".
IS: dict[State, str] = {
    State.PENDING: "waiting",
    State.SCHEDULED: "scheduled",
    State.RUNNING: "running",
    State.DONE: "done",
    State.FAILED: "a dead letter",
}
# The order each state's index lists jobs in (engine/stores/lmdb/reads.py list_jobs).
INDEX_ORDER: dict[State, str] = {
    State.PENDING: "claim order",
    State.SCHEDULED: "due time",
    State.RUNNING: "job id",
    State.DONE: "finish time",
    State.FAILED: "job id",
}
# That order as listed (first) and reversed (?o=reverse).
DIRECTIONS: dict[State, tuple[str, str]] = {
    State.PENDING: ("claim order, next to run first", "claim order, last to run first"),
    State.SCHEDULED: ("due time, soonest first", "due time, latest first"),
    State.RUNNING: ("job id, oldest first", "job id, newest first"),
    State.DONE: ("finish time, newest first", "finish time, oldest first"),
    State.FAILED: ("job id, newest first", "job id, oldest first"),
}
# Sort orders a list page takes (?o=): the index order either way, and for dead letters failed-at.
INDEX_FIRST, INDEX_LAST, FAILED_NEWEST, FAILED_OLDEST = "", "reverse", "-failed_at", "failed_at"
ORDERS = (INDEX_FIRST, INDEX_LAST, FAILED_NEWEST, FAILED_OLDEST)
NEWEST_FIRST_BY_DEFAULT = frozenset({State.DONE, State.FAILED})  # most recent first; the rest claim order


class ListingMoved(Exception):
    """The job a page continues from is gone from the store, so that page cannot be computed any more."""


def parse_job_id(value: Any) -> int | None:
    """A job id from a URL or form value, or None when it cannot name a job."""
    try:
        job_id = int(value)
    except (TypeError, ValueError):
        return None
    return job_id if 0 < job_id <= MAX_JOB_ID else None


@dataclass(frozen=True)
class Filters:
    """The filters of a list page: ``q`` searches task names, error types and error texts (case-insensitive),
    but its words ``tag:T`` are tags the jobs must all have (found through the store's tag index: the page
    then lists that tag's jobs, newest first, and scans nothing else); ``task``, ``queue`` and ``error_type``
    match exactly; ``shard`` is a shard number."""

    search: str = ""
    task: str = ""
    queue: str = ""
    error_type: str = ""
    shard: int | None = None
    workflow: int | None = None  # the jobs of one workflow (its nodes' jobs: their metadata names it)
    decrypt: bool = False  # args./meta. searches look into encrypted jobs (admin/payloads.py's permission)

    @classmethod
    def from_query(cls, data: Mapping[str, Any], *, decrypt: bool = False) -> Filters:
        def text(key: str) -> str:
            value = data.get(key, "")
            return value.strip() if isinstance(value, str) else ""

        shard = text("shard")
        workflow = text("workflow")
        return cls(
            search=text("q"),
            task=text("task"),
            queue=text("queue"),
            error_type=text("error_type"),
            shard=int(shard) if shard.isdigit() else None,
            workflow=int(workflow) if workflow.isdigit() else None,
            decrypt=decrypt,
        )

    def as_query(self) -> dict[str, str]:
        """The query-string parameters that give these filters back (empty ones left out)."""
        pairs = {
            "q": self.search,
            "task": self.task,
            "queue": self.queue,
            "error_type": self.error_type,
            "shard": "" if self.shard is None else str(self.shard),
            "workflow": "" if self.workflow is None else str(self.workflow),
        }
        return {key: value for key, value in pairs.items() if value}

    @property
    def active(self) -> bool:
        return bool(self.as_query())

    @property
    def tags(self) -> tuple[str, ...]:
        """The ``tag:T`` words of the search (valid tags only: another word is searched as text)."""
        return search_words(self.search)[0]

    @property
    def text(self) -> str:
        """The search without its tags and fields: what task names and errors are searched for."""
        return " ".join(word for word in search_words(self.search)[1].split() if field_of(word) is None)

    @property
    def fields(self) -> list[Field]:
        """The ``args.NAME:VALUE`` and ``meta.KEY:VALUE`` words of the search (fieldsearch.py): unindexed."""
        return [found for word in search_words(self.search)[1].split() if (found := field_of(word))]

    @property
    def scans(self) -> bool:
        """True when some filter is tested here rather than by the engine (the list is then a scan)."""
        return bool(
            self.text or self.fields or self.error_type or self.shard is not None or self.workflow is not None
        )

    def engine_options(self, shard_count: int) -> dict[str, Any]:
        """The filters the engine applies itself as it lists (a shard that exists is listed alone)."""
        options: dict[str, Any] = {
            key: value for key, value in (("queue", self.queue), ("name", self.task)) if value
        }
        if self.shard is not None and self.shard < shard_count:
            options["shard"] = self.shard
        return options

    def matches(self, job: Job) -> bool:
        if self.shard is not None and job.shard != self.shard:
            return False
        if self.workflow is not None and workflow_of(job) != self.workflow:
            return False
        if self.error_type and job.error_type != self.error_type:
            return False
        if not all(fieldsearch.matches(job, found, decrypt=self.decrypt) for found in self.fields):
            return False
        if self.text:
            needle = self.text.casefold()
            haystacks = (job.name, job.error_type, job.error)
            return any(needle in text.casefold() for text in haystacks if text)
        return True


def search_words(search: str) -> tuple[tuple[str, ...], str]:
    """(the tags, the rest) of a search: each word ``tag:T`` whose ``T`` is a valid tag is a tag."""
    tags: list[str] = []
    rest: list[str] = []
    for word in search.split():
        value = word[len(TAG_WORD) :] if word.lower().startswith(TAG_WORD) else None
        if value and TAG_PATTERN.fullmatch(value):
            tags.append(value)
        else:
            rest.append(word)
    return tuple(dict.fromkeys(tags)), " ".join(rest)


def workflow_of(job: Job) -> int | None:
    """The id of the workflow ``job`` is a node of (its metadata says), else None."""
    link = job.metadata.get(WORKFLOW_KEY)
    if isinstance(link, list) and len(link) == 2 and type(link[0]) is int:
        return link[0]
    return None


@dataclass
class Scan:
    """How far a scan went: jobs examined, and where to go on from when it stopped at its limit."""

    limit: int = field(default_factory=lambda: SCAN_LIMIT)
    examined: int = 0
    stopped_after: int | None = None  # the last job id examined, when the limit cut the scan short


def matching(
    queue: Queue,
    state: State,
    filters: Filters,
    *,
    after: int | None = None,
    newest_first: bool = False,
    scan: Scan | None = None,
    want: int = BATCH,
) -> Iterator[Job]:
    """The jobs in ``state`` that match ``filters``, in the index order, from past ``after``, until the
    engine has none left or ``scan.limit`` jobs were examined. ``want`` sizes the engine calls when no filter
    is tested here (a page asks for just what it shows). ``ListingMoved`` when ``after`` is gone."""
    scan = scan if scan is not None else Scan()
    cursor = after
    while scan.examined < scan.limit:
        size = min(BATCH if filters.scans else want, scan.limit - scan.examined)
        try:
            if filters.tags:  # the tag index: newest first, whatever the state's order
                where = {"queue": filters.queue or None, "name": filters.task or None}
                batch = queue.tagged(*filters.tags, state=state, after=cursor, limit=size, **where)
            else:
                batch = queue.jobs(
                    state,
                    after=cursor,
                    limit=size,
                    newest_first=newest_first,
                    **filters.engine_options(queue.shard_count),
                )
        except InvalidJob as exc:
            raise ListingMoved(str(exc)) from exc
        for job in batch:
            scan.examined += 1
            cursor = job.job_id
            if filters.matches(job):
                yield job
        if len(batch) < size:
            return
    scan.stopped_after = cursor


@dataclass
class Page:
    """One page of a list: its jobs, where the next page starts, and whether a scan limit cut it short."""

    jobs: list[Job]
    next_after: str | None  # the ``after`` of the next page, None on the last one
    scan: Scan = field(default_factory=Scan)

    @property
    def cut_short(self) -> bool:
        """True when the scan limit stopped the search before the page was full."""
        return self.scan.stopped_after is not None


def page(
    queue: Queue, state: State, filters: Filters, *, after: str | None, order: str, size: int = PAGE_SIZE
) -> Page:
    """The page of ``state`` after ``after`` (None: the first) in ``order`` (one of ``ORDERS``)."""
    if order in (FAILED_NEWEST, FAILED_OLDEST):
        return _page_by_failed_at(queue, filters, after=after, newest_first=order == FAILED_NEWEST, size=size)
    newest_first = (state in NEWEST_FIRST_BY_DEFAULT) != (order == INDEX_LAST)
    scan = Scan(limit=PAGE_SCAN_LIMIT)
    jobs: list[Job] = []
    start = parse_job_id(after) if after else None
    for job in matching(
        queue, state, filters, after=start, newest_first=newest_first, scan=scan, want=size + 1
    ):
        jobs.append(job)
        if len(jobs) > size:
            break
    if len(jobs) > size:
        return Page(jobs[:size], str(jobs[size - 1].job_id), scan)
    return Page(jobs, None if scan.stopped_after is None else str(scan.stopped_after), scan)


def _page_by_failed_at(
    queue: Queue, filters: Filters, *, after: str | None, newest_first: bool, size: int
) -> Page:
    """Dead letters by (failed-at, id): one bounded scan of the newest by id keeps the ``size + 1`` keys past
    ``after``, then reads only those jobs. ``after`` is ``"<failed-at µs>:<job id>"``."""
    bound = _failed_at_key(after)
    scan = Scan(limit=PAGE_SCAN_LIMIT)
    keys: Iterator[tuple[int, int]] = (
        (round((job.finished_at or 0.0) * 1_000_000), job.job_id)
        for job in matching(queue, State.FAILED, filters, newest_first=True, scan=scan)
    )
    if bound is not None:
        keys = (key for key in keys if (key < bound if newest_first else key > bound))
    chosen = (heapq.nlargest if newest_first else heapq.nsmallest)(size + 1, keys)
    jobs = [job for job in (queue.job(job_id) for _at, job_id in chosen[:size]) if job is not None]
    next_after = f"{chosen[size - 1][0]}:{chosen[size - 1][1]}" if len(chosen) > size else None
    return Page(jobs, next_after, scan)


def _failed_at_key(after: str | None) -> tuple[int, int] | None:
    if not after or ":" not in after:
        return None
    at, _, job_id = after.partition(":")
    return (int(at), int(job_id)) if at.isdigit() and job_id.isdigit() else None


@dataclass(frozen=True)
class Count:
    """How many jobs match: exact, or at least ``value`` when counting stopped at the scan limit."""

    value: int
    exact: bool = True

    def __str__(self) -> str:
        return f"{self.value:,}" if self.exact else f"{self.value:,}+"


def count_without_scan(queue: Queue, state: State, filters: Filters) -> Count | None:
    """How many jobs in ``state`` match ``filters`` when the engine's counters tell (no filter: O(1); one
    queue of a live state: the engine's queue counts), else None."""
    if not filters.active:
        return Count(queue.stats()[state.value])
    live = state in (State.PENDING, State.SCHEDULED, State.RUNNING)
    if live and filters.queue and not (filters.task or filters.scans):
        return Count(queue.queue_counts().get(filters.queue, {}).get(state.value, 0))
    return None


def count(queue: Queue, state: State, filters: Filters, *, limit: int | None = None) -> Count:
    """How many jobs in ``state`` match ``filters``: from the counters when they tell, else a scan of at most
    ``limit`` jobs (``SCAN_LIMIT``)."""
    counted = count_without_scan(queue, state, filters)
    if counted is not None:
        return counted
    scan = Scan() if limit is None else Scan(limit=limit)
    found = sum(1 for _job in matching(queue, state, filters, scan=scan))
    return Count(found, exact=scan.stopped_after is None)


def noun(state: State, how_many: Count) -> str:
    """What ``how_many`` jobs of ``state`` are called: "dead letter" for exactly one, else "dead letters"."""
    one, many = NOUNS[state]
    return one if how_many.exact and how_many.value == 1 else many


def counted(state: State, how_many: Count) -> str:
    """``how_many`` jobs of ``state`` in words: "1 dead letter", "12 waiting jobs", "25,000+ done jobs"."""
    return f"{how_many} {noun(state, how_many)}"


def count_for_page(queue: Queue, state: State, filters: Filters, shown: Page, *, first: bool) -> Count:
    """How many jobs match ``filters``, for a list page that shows ``shown``: from the counters when they
    tell; from the page itself when it is the first and holds every match; else a scan of at most
    ``PAGE_SCAN_LIMIT`` jobs (shown as "25,000+" when it stopped there)."""
    counted_now = count_without_scan(queue, state, filters)
    if counted_now is not None:
        return counted_now
    if first and shown.next_after is None and not shown.cut_short:
        return Count(len(shown.jobs))
    return count(queue, state, filters, limit=PAGE_SCAN_LIMIT)


@dataclass(frozen=True)
class Facet:
    """One value a list's sidebar offers for a filter, with how many jobs have it (None: not counted)."""

    value: str
    count: int | None


@dataclass(frozen=True)
class Facets:
    """The sidebar's values for the task, queue and error type filters of one state's list. ``exact``: the
    counts cover every job of the state, not only the newest ``FACET_SCAN_LIMIT``."""

    tasks: list[Facet]
    queues: list[Facet]
    error_types: list[Facet]
    exact: bool


def facets(
    queue: Queue, state: State, *, known_tasks: Iterable[str] = (), limit: int | None = None
) -> Facets:
    """Count the newest jobs of ``state`` (``FACET_SCAN_LIMIT`` at most) by task, queue and error type, in one
    bounded walk, most frequent first. When the walk stopped at its limit, the ``known_tasks`` it did not
    meet are offered too, uncounted: they may be among the older jobs."""
    scan = Scan(limit=FACET_SCAN_LIMIT if limit is None else limit)
    tasks: Counter[str] = Counter()
    queues: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    for job in matching(queue, state, Filters(), newest_first=True, scan=scan):
        if job.name:
            tasks[job.name] += 1
        queues[job.queue] += 1
        if job.error_type:
            errors[job.error_type] += 1
    exact = scan.stopped_after is None

    def ranked(counter: Counter[str]) -> list[Facet]:
        return [
            Facet(value, count)
            for value, count in sorted(counter.items(), key=lambda item: (-item[1], item[0]))
        ]

    offered = ranked(tasks)
    if not exact:
        offered += [Facet(name, None) for name in sorted(set(known_tasks) - set(tasks))]
    return Facets(offered, ranked(queues), ranked(errors), exact)
