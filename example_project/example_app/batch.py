"""A realistic mix of jobs, enqueued by the page's button and by ``manage.py queue_demo``.

``enqueue_batch()`` returns one ``Entry`` per job (what it is, and its job id); ``describe()`` reads a job
back from the store, from any process, as the page and the demo show it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import django

from queue_max_django.results import JobNotFound, JobResult

from . import fakeapi
from .tasks import (
    check_website,
    count_primes,
    fetch_exchange_rate,
    notify_partner,
    queue_report,
    send_welcome_email,
)

UNKNOWN_CURRENCIES = ["XAU", "BTC"]  # the pretend API answers 404 for these: dead letters, never retried


@dataclass(frozen=True)
class Entry:
    kind: str  # a label for people: "email", "primes", ...
    job_id: int


def enqueue_batch(*, seed: int | None = None) -> list[Entry]:
    """Enqueue one of each kind of job, several of most. -> the entries, in the order enqueued."""
    rng = random.Random(seed)
    entries: list[Entry] = []

    def add(kind: str, results: list[JobResult]) -> None:
        entries.extend(Entry(kind, result.job_id) for result in results)

    people = ["ada", "grace", "alan", "edsger", "barbara", "donald", "frances", "ken", "margaret", "dennis"]
    add("email", send_welcome_email.map([f"{who}@example.com" for who in people]))
    add("email (priority 50)", [send_welcome_email.using(priority=50).delay("ceo@example.com", "Boss")])
    add("email (in 2 s)", [send_welcome_email.schedule_in(2, "later@example.com")])
    add("primes", count_primes.map([rng.randrange(100_000, 600_000) for _ in range(4)]))
    currencies = [*fakeapi.RATES, *fakeapi.RATES]
    add("exchange rate", fetch_exchange_rate.map([*currencies, *UNKNOWN_CURRENCIES]))
    add("partner call (10/s)", notify_partner.map(range(1000, 1030)))
    add("async check", check_website.map([f"https://example.com/page/{n}" for n in range(6)]))
    add("periodic report", [queue_report.delay()])
    if django.VERSION >= (6, 0):  # django.tasks: see settings.TASKS
        from .django_tasks import make_invoice_number

        for order in range(3):
            result = make_invoice_number.enqueue(order + 41)
            entries.append(Entry("django.tasks invoice", int(result.id)))
    return entries


def describe(entry: Entry) -> dict[str, Any]:
    """The job as the page and the demo show it: status, attempts, and its result or its error."""
    try:
        result = JobResult.load(entry.job_id)
    except JobNotFound:
        return {"id": str(entry.job_id), "kind": entry.kind, "status": "GONE", "attempts": 0, "detail": ""}
    job = result.job
    if job.state == "done":
        detail = repr(job.result)
    elif job.error is not None:
        detail = f"{job.error_type}: {job.error}"
    elif job.state == "scheduled" and job.eta is not None:
        detail = "waiting for its time"
    else:
        detail = ""
    return {
        "id": result.id,
        "kind": entry.kind,
        "task": job.name,
        "state": str(job.state),
        "status": str(result.status),
        "attempts": job.attempts,
        "detail": detail[:120],
    }
