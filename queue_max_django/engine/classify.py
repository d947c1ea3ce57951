"""Error classification: from the exception a task raised, decide whether to retry and after what delay.

``classify`` is pure (no clock: pass ``now`` to resolve a ``Retry-After`` date). Its rules, first match wins:

1. ``Retry`` raised by the task: retry, after its ``delay`` (or the backoff when it has none).
2. ``Permanent`` raised by the task: fail for good.
3. An instance of a ``permanent_on`` class: fail for good.
4. An instance of a ``retry_on`` class: retry with the backoff.
5. An HTTP status on the exception (``exc.status``, ``exc.status_code`` or ``exc.response.status_code``):
   429 retries after ``Retry-After`` when the response has one, else with the backoff; 408 and 5xx retry with
   the backoff (503 also honours ``Retry-After``); any other 4xx fails for good. Other statuses decide
   nothing.
6. ``TimeoutError`` (``socket.timeout``, ``asyncio.TimeoutError``) and ``ConnectionError``: retry with the
   backoff.
7. Anything else: **retry with the backoff**. A failure nothing recognises may be transient, so it is retried;
   the queue's ``max_retries`` bounds how often. Raise ``Permanent`` or list the class in ``permanent_on``
   for errors that retrying cannot fix.

``Decision.delay`` None means "the caller applies its backoff" (``retry.backoff_delay``).

``is_interrupt`` tells a user's Ctrl-C from an exception a task raised: only those stop a job without a
failed attempt.
"""

from __future__ import annotations

import datetime as _dt
import email.utils
import math
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MAX_DELAY = 100 * 365.25 * 86400  # a Retry-After beyond a century is garbage, not advice

ExceptionTypes = type[BaseException] | tuple[type[BaseException], ...] | list[type[BaseException]]

_DELTA_SECONDS = re.compile(r"\d+(?:\.\d+)?")
_STATUS_ATTRIBUTES = ("status", "status_code")


class Retry(Exception):
    """Raise from a task to retry it: after ``delay`` seconds, or after the queue's backoff when None.

    ``reason`` is stored as the job's error; ``cause`` (or ``raise Retry(...) from exc``) keeps the
    underlying exception as ``__cause__``. Still bounded by ``max_retries``.
    """

    def __init__(
        self, reason: str | None = None, *, delay: float | None = None, cause: BaseException | None = None
    ) -> None:
        if reason is not None and not isinstance(reason, str):
            raise TypeError(f"Retry(reason) must be a str; pass the delay as Retry(delay={reason!r})")
        if delay is not None and (
            isinstance(delay, bool) or not isinstance(delay, (int, float)) or not math.isfinite(delay)
        ):
            raise TypeError(f"Retry(delay=) must be a finite number of seconds or None, not {delay!r}")
        if delay is not None and not 0 <= delay <= MAX_DELAY:
            raise ValueError(f"Retry(delay=) must be from 0 to {MAX_DELAY:.0f} seconds, not {delay!r}")
        super().__init__(*(() if reason is None else (reason,)))
        self.reason = reason
        self.delay = None if delay is None else float(delay)
        if cause is not None:
            self.__cause__ = cause

    @property
    def cause(self) -> BaseException | None:
        """The underlying exception, if any."""
        return self.__cause__


class Permanent(Exception):
    """Raise from a task to fail it for good, without retrying: the input is wrong, retrying cannot help."""


@dataclass(frozen=True, slots=True)
class Decision:
    """Retry or not; after ``delay`` seconds (None: the caller's backoff); ``reason`` names the rule."""

    retry: bool
    delay: float | None
    reason: str


def _type_name(kind: type[BaseException]) -> str:
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def exception_types(value: Any, *, name: str) -> tuple[type[BaseException], ...]:
    """``value`` (an exception class, or a tuple/list of them) as a tuple; TypeError naming ``name`` else."""
    items = tuple(value) if isinstance(value, (tuple, list, set, frozenset)) else (value,)
    for item in items:
        if not isinstance(item, type) or not issubclass(item, BaseException):
            raise TypeError(
                f"{name} must be an exception class or a tuple/list of them; {item!r} is not an exception "
                f"class"
            )
    return items


def _attribute(obj: Any, name: str) -> Any:
    """``getattr(obj, name, None)``, also when the attribute is a property that raises."""
    try:
        return getattr(obj, name, None)
    except Exception:
        return None


def _as_status(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (bytes, str)):
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        text = text.strip()
        number = int(text) if text.isdecimal() and text.isascii() else None
    elif isinstance(value, float):
        number = int(value) if value.is_integer() else None
    else:
        try:
            number = value.__index__()  # int, IntEnum (http.HTTPStatus), numpy integers
        except Exception:
            return None
    return number if number is not None and 100 <= number <= 599 else None


def http_status(exc: BaseException) -> int | None:
    """The HTTP status on an exception (``status``, ``status_code``, ``response.status_code``), or None."""
    for name in _STATUS_ATTRIBUTES:
        status = _as_status(_attribute(exc, name))
        if status is not None:
            return status
    response = _attribute(exc, "response")
    return None if response is None else _as_status(_attribute(response, "status_code"))


def _header(headers: Any) -> Any:
    """The ``Retry-After`` value of a headers object (case-insensitive), or None."""
    if headers is None:
        return None
    get = _attribute(headers, "get")
    if callable(get):
        for key in ("Retry-After", "retry-after"):
            try:
                value = get(key)
            except Exception:
                value = None
            if value is not None:
                return value
    if isinstance(headers, Mapping):
        try:
            for key, value in headers.items():
                if isinstance(key, str) and key.lower() == "retry-after":
                    return value
        except Exception:
            return None
    return None


def parse_retry_after(value: Any, now: float | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value: delta-seconds (``"30"``), an HTTP date (resolved
    against ``now``; None without it), a number, a ``timedelta`` or an aware ``datetime``. Never negative (a
    date in the past gives 0); None for anything unusable."""
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if isinstance(value, bool):
        return None
    delay: float | None = None
    if isinstance(value, (int, float)):
        delay = float(min(value, MAX_DELAY + 1)) if value >= 0 else None  # min(): no OverflowError
    elif isinstance(value, _dt.timedelta):
        delay = value.total_seconds() if value >= _dt.timedelta(0) else None
    elif isinstance(value, _dt.datetime):
        if now is None or value.tzinfo is None:
            return None
        delay = max(0.0, value.timestamp() - now)
    elif isinstance(value, str):
        text = value.strip()
        if _DELTA_SECONDS.fullmatch(text):
            delay = float(text)
        elif now is not None and text:
            try:
                when = email.utils.parsedate_to_datetime(text)
            except (TypeError, ValueError, IndexError, OverflowError):
                return None
            if when.tzinfo is None:  # "-0000": HTTP dates are always GMT
                when = when.replace(tzinfo=_dt.UTC)
            delay = max(0.0, when.timestamp() - now)
    if delay is None or not math.isfinite(delay) or delay > MAX_DELAY:
        return None
    return delay


def retry_after(exc: BaseException, now: float | None = None) -> float | None:
    """The ``Retry-After`` an exception carries: ``exc.response.headers``, then ``exc.headers``, then
    ``exc.retry_after``; the first usable one wins. None when there is none (or only garbage)."""
    response = _attribute(exc, "response")
    candidates = (
        _header(None if response is None else _attribute(response, "headers")),
        _header(_attribute(exc, "headers")),
        _attribute(exc, "retry_after"),
    )
    for value in candidates:
        if value is not None:
            delay = parse_retry_after(value, now)
            if delay is not None:
                return delay
    return None


def _http_decision(exc: BaseException, status: int, now: float | None) -> Decision | None:
    if status == 429 or status == 503:
        kind = "rate limiting" if status == 429 else "a server error"
        delay = retry_after(exc, now)
        if delay is not None:
            return Decision(True, delay, f"HTTP {status} is {kind}; Retry-After: {delay:g}")
        return Decision(True, None, f"HTTP {status} is {kind}; retried with backoff")
    if status == 408:
        return Decision(True, None, "HTTP 408 is a request timeout; retried with backoff")
    if 400 <= status <= 499:
        return Decision(False, None, f"HTTP {status} is a client error")
    if 500 <= status <= 599:
        return Decision(True, None, f"HTTP {status} is a server error; retried with backoff")
    return None


def classify(
    exc: BaseException,
    *,
    retry_on: ExceptionTypes = (),
    permanent_on: ExceptionTypes = (),
    now: float | None = None,
) -> Decision:
    """Decide what to do after ``exc`` ended an attempt (the rules are in the module docstring).

    ``retry_on`` / ``permanent_on``: exception classes (one, or a tuple/list) that always retry / never do.
    ``now`` (unix seconds) resolves a ``Retry-After`` given as an HTTP date; without it, such dates are
    ignored.
    """
    permanent_types = exception_types(permanent_on, name="permanent_on")
    retry_types = exception_types(retry_on, name="retry_on")
    if isinstance(exc, Retry):
        detail = f": {exc.reason}" if exc.reason else ""
        if exc.delay is None:
            return Decision(True, None, f"Retry raised{detail}; retried with backoff")
        return Decision(True, exc.delay, f"Retry(delay={exc.delay:g}) raised{detail}")
    if isinstance(exc, Permanent):
        return Decision(False, None, f"Permanent raised: {exc}" if str(exc) else "Permanent raised")
    name = _type_name(type(exc))
    if permanent_types and isinstance(exc, permanent_types):
        return Decision(False, None, f"{name} is listed in permanent_on")
    if retry_types and isinstance(exc, retry_types):
        return Decision(True, None, f"{name} is listed in retry_on; retried with backoff")
    status = http_status(exc)
    if status is not None:
        decision = _http_decision(exc, status, now)
        if decision is not None:
            return decision
    if isinstance(exc, TimeoutError):
        return Decision(True, None, f"{name} is a timeout; retried with backoff")
    if isinstance(exc, ConnectionError):
        return Decision(True, None, f"{name} is a connection error; retried with backoff")
    return Decision(True, None, f"{name} is not classified; retried with backoff up to max_retries")


def is_interrupt(exc: BaseException) -> bool:
    """Is ``exc``, raised while a task ran, the user's Ctrl-C rather than the task's own doing? Only a
    ``KeyboardInterrupt`` on the main thread can be: Python raises SIGINT's there and in no other thread.
    Everything else a task raises (``SystemExit`` from ``sys.exit()`` or argparse included) is the task
    failing, an attempt like any exception."""
    return isinstance(exc, KeyboardInterrupt) and threading.current_thread() is threading.main_thread()
