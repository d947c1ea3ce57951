"""The example's tasks: one for each kind of work a web application hands to a background queue.

Every installed app's ``tasks.py`` is imported when Django starts (queue_max_django autodiscovers it), so
the worker knows these tasks by name: ``example_app.tasks.send_welcome_email`` and so on.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Any

from django.core import signing

from queue_max_django import periodic_task, task
from queue_max_django.conf import get_queue
from queue_max_django.engine import Permanent

from . import fakeapi


@task(queue="mail", priority=10, max_retries=5)
def send_welcome_email(address: str, name: str = "") -> dict[str, Any]:
    """I/O-bound: most of the time is spent waiting on the mail server (simulated by a sleep), so a worker
    runs several at once in its threads."""
    time.sleep(0.1)  # the SMTP round trips
    message_id = hashlib.sha1(address.encode()).hexdigest()[:12]
    return {"to": address, "subject": f"Welcome, {name or address}!", "message_id": f"<{message_id}@example>"}


@task(queue="cpu", timeout=60)
def count_primes(limit: int) -> int:
    """CPU-bound: the primes below ``limit``, by a sieve. Run such tasks in several worker processes
    (``--processes``): threads of one process share one core for Python code."""
    sieve = bytearray([1]) * max(limit, 2)
    sieve[0] = sieve[1] = 0
    for number in range(2, int(limit**0.5) + 1):
        if sieve[number]:
            sieve[number * number :: number] = bytes(len(range(number * number, len(sieve), number)))
    return sum(sieve[:limit])


@task(queue="api", max_retries=4, retry_backoff=0.2)
def fetch_exchange_rate(currency: str) -> float:
    """Calls a flaky API. A 503 (``ApiError.status``) is retried after a backoff of 0.2 s, 0.4 s, 0.8 s ...
    (±20 %); a 404 goes straight to the dead letters: no retry can make an unknown currency known."""
    try:
        return fakeapi.get_rate(currency)
    except fakeapi.ApiError as exc:
        if exc.status == 404:
            # The classifier treats an HTTP 4xx as permanent by itself; saying so makes the intent plain.
            raise Permanent(str(exc)) from exc
        raise  # 503: retried with backoff until max_retries is spent


@task(queue="partners", rate_limit="10/s")
def notify_partner(order_id: int) -> str:
    """Rate-limited: at most 10 calls a second for this task across every worker process and thread (and
    20 a second for the whole ``partners`` queue, from ``QUEUE_RATE_LIMITS`` in settings). Jobs over the
    budget wait in the store; no worker sleeps on them."""
    return signing.dumps({"order": order_id, "at": time.time()})[:24]


@task(queue="api")
async def check_website(url: str) -> dict[str, Any]:
    """An ``async def`` task: the worker runs it to completion on an event loop of its thread."""
    started = time.monotonic()
    await asyncio.sleep(0.05)  # an HTTP request with an async client (httpx, aiohttp) would go here
    return {"url": url, "ok": True, "ms": round((time.monotonic() - started) * 1000)}


@periodic_task(interval=60)
def queue_report() -> dict[str, int]:
    """Periodic: the scheduler of ``manage.py queue_worker`` enqueues it once a minute (once for all
    workers). It takes no arguments. It can be ``.delay()``-ed as well, as the demo does."""
    stats = get_queue().stats()
    return {state: stats[state] for state in ("pending", "scheduled", "running", "done", "failed")}
