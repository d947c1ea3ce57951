"""Argument checks shared by the engine: each raises a clear ``InvalidJob`` or ``ConfigurationError``
(both ``ValueError``s) naming the argument, before anything is written (invariant 7)."""

from __future__ import annotations

import datetime as _dt
import math
import traceback as _traceback
import unicodedata
from typing import Any

from . import tags
from .errors import ConfigurationError, InvalidJob, UnknownQueue
from .job import PRIORITY_MAX, PRIORITY_MIN, State
from .metadata import pack_metadata

MAX_QUEUE_NAME = 100
MAX_NAME = 200
MAX_ERROR_CHARS = 65_536
MAX_SECONDS = 100 * 365.25 * 86400  # the longest delay, lease, TTL or interval accepted: a century
MAX_ETA = 253_402_300_799.0  # 9999-12-31T23:59:59Z
MAX_RETRIES_LIMIT = 1_000_000


def check_number(
    name: str,
    value: Any,
    *,
    minimum: float,
    maximum: float = MAX_SECONDS,
    allow_none: bool = False,
    error: type[ValueError] = ConfigurationError,
) -> None:
    """A finite real number in [minimum, maximum], or ``error`` naming the argument."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise error(f"{name} must be a finite number, not {value!r}")
    if not minimum <= value <= maximum:
        raise error(f"{name} must be from {minimum} to {maximum:.0f}, not {value!r}")


def bad_character(text: str) -> str | None:
    """Why ``text`` cannot be a name, or None: a control character (Unicode category Cc: NUL, newline, ESC,
    BEL, DEL, C1 controls) would reach an operator's terminal raw; a lone surrogate has no UTF-8, so no
    store key. Costs one ``isprintable()`` for an ordinary name."""
    if text.isprintable():
        return None
    for position, char in enumerate(text):
        category = unicodedata.category(char)
        if category == "Cc":
            return f"a control character ({char!r} at position {position})"
        if category == "Cs":
            return f"a lone surrogate ({char!r} at position {position}), which has no UTF-8 encoding"
    return None  # only other unprintable characters (format, separators, private use): allowed


def check_filter(what: str, value: Any) -> None:
    """A listing's ``queue``/``name`` filter: None or a str with a UTF-8 encoding. Control characters are
    let through: a store of an earlier version may hold such names, and they must stay listable."""
    if value is None:
        return
    if not isinstance(value, str):
        raise InvalidJob(f"{what} must be None or a str, not {value!r}")
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:
            raise InvalidJob(f"{what} must be valid Unicode (no lone surrogates), not {value!r}") from None


def validate_queue_name(queue: Any) -> str:
    if not isinstance(queue, str) or not queue or len(queue) > MAX_QUEUE_NAME:
        raise InvalidJob(
            f"queue must be a non-empty str of at most {MAX_QUEUE_NAME} characters, not {queue!r}"
        )
    why = bad_character(queue)
    if why is not None:
        raise InvalidJob(
            f"queue names cannot contain control characters or lone surrogates: {queue!r} has {why}"
        )
    return queue


def validate_name(name: Any) -> str:
    """A job's name (the Django layer's task name): 1 to ``MAX_NAME`` characters, none of them a control
    character or a lone surrogate."""
    if not isinstance(name, str) or not name or len(name) > MAX_NAME:
        raise InvalidJob(
            f"name must be None or a non-empty str of at most {MAX_NAME} characters, not {name!r}"
        )
    why = bad_character(name)
    if why is not None:
        raise InvalidJob(f"names cannot contain control characters or lone surrogates: {name!r} has {why}")
    return name


class DescribedError(Exception):
    """An error given to ``nack`` already described: its (text, type, traceback) are stored as they are (an
    encrypted job's, sealed by the Django layer: ``queue_max_django/encryption/jobs.py``)."""

    def __init__(self, text: str, type_name: str | None, trace: str | None) -> None:
        super().__init__(text)
        self.parts = (text, type_name, trace)


def describe_error(error: BaseException | str | None) -> tuple[str, str | None, str | None]:
    """(text, type, traceback) of what ``nack(error=...)`` was given, bounded in size, each as every store
    can hold it (``storable_text``); a ``DescribedError``'s as they are."""
    if type(error) is DescribedError:
        return error.parts
    if error is None:
        return "nack() called without an error", None, None
    if isinstance(error, BaseException):
        kind = type(error)
        type_name = storable_text(
            kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
        )
        text = storable_text(error_text(error)) or type_name
        trace = None
        if error.__traceback__ is not None:
            trace = "".join(_traceback.format_exception(kind, error, error.__traceback__))
            trace = storable_text(trace)[-MAX_ERROR_CHARS:]
        return text[:MAX_ERROR_CHARS], type_name, trace
    return storable_text(str(error))[:MAX_ERROR_CHARS], None, None


def error_text(error: BaseException) -> str:
    """``str(error)``, or what the traceback module shows in its place when its ``__str__`` raises."""
    try:
        return str(error)
    except Exception:
        return "<exception str() failed>"


def storable_text(text: str) -> str:
    """``text`` as every store can hold it, escaped where it could not be: a lone surrogate (a file name
    decoded with ``surrogateescape``), which has no UTF-8 encoding, as ``\\udce9``; a NUL character, which
    PostgreSQL's text refuses, as ``\\x00`` (on every store, so that an error reads the same on each)."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError:
            text = text.encode("utf-8", "backslashreplace").decode()
    return text


def ready_at(delay: float | None, eta: float | _dt.datetime | None, now: float) -> float | None:
    if delay is not None and eta is not None:
        raise InvalidJob("give delay or eta, not both")
    if delay is not None:
        if isinstance(delay, _dt.timedelta):
            delay = delay.total_seconds()
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not math.isfinite(delay):
            raise InvalidJob(f"delay must be a finite number of seconds, not {delay!r}")
        if delay < 0:
            raise InvalidJob(f"delay cannot be negative ({delay!r}); use 0 to run now")
        if now + delay > MAX_ETA:
            raise InvalidJob(f"delay {delay!r} s is past the year 9999")
        return now + delay if delay > 0 else None
    if eta is not None:
        if isinstance(eta, _dt.datetime):
            if eta.tzinfo is None or eta.utcoffset() is None:
                raise InvalidJob("eta must be an aware datetime (with a tzinfo) or a unix timestamp")
            eta = eta.timestamp()
        if (
            isinstance(eta, bool)
            or not isinstance(eta, (int, float))
            or not math.isfinite(eta)
            or not 0 <= eta <= MAX_ETA
        ):
            raise InvalidJob(f"eta must be an aware datetime or a unix timestamp >= 0, not {eta!r}")
        return float(eta) if eta > now else None
    return None


def check_partition_key(key: Any) -> None:
    if isinstance(key, bool) or not isinstance(key, (str, int, bytes)):
        raise InvalidJob(f"partition_key must be a str, int or bytes, not {type(key).__name__}")
    if isinstance(key, int) and not -(2**63) <= key < 2**64:
        raise InvalidJob(f"partition_key {key} is out of the 64-bit range msgpack can store")
    if isinstance(key, (str, bytes)) and len(key) > MAX_NAME:
        raise InvalidJob(f"partition_key is longer than {MAX_NAME} characters")
    if isinstance(key, str) and not key.isascii():  # isascii() is a flag test: ASCII keys pay nothing
        try:
            key.encode()
        except UnicodeEncodeError:
            raise InvalidJob(
                f"partition_key must be valid Unicode (no lone surrogates), not {key!r}"
            ) from None


def parse_state(state: State | str) -> State:
    try:
        return State(state)
    except ValueError:
        raise InvalidJob(f"unknown state {state!r}: use one of {[s.value for s in State]}") from None


_PUT_OPTIONS = (
    "priority",
    "delay",
    "eta",
    "queue",
    "name",
    "max_retries",
    "timeout",
    "partition_key",
    "metadata",
    "concurrency",
)


def put_defaults(options: dict[str, Any]) -> dict[str, Any]:
    unknown = set(options) - set(_PUT_OPTIONS)
    if unknown:
        raise InvalidJob(f"unknown put option(s): {sorted(unknown)}")
    defaults: dict[str, Any] = dict.fromkeys(_PUT_OPTIONS)
    defaults["priority"] = 0
    defaults["queue"] = "default"
    defaults.update(options)
    return defaults


def check_put(
    *,
    priority: Any = 0,
    delay: Any = None,
    eta: Any = None,
    queue: Any = "default",
    name: Any = None,
    max_retries: Any = None,
    timeout: Any = None,
    partition_key: Any = None,
    metadata: Any = None,
    queues: frozenset[str] | tuple[str, ...] | None = None,
    now: float,
    valid_queues: set[str] | None = None,
    valid_names: set[str] | None = None,
) -> None:
    """Everything ``Queue.put()`` checks of its options (``put()`` checks them here too), with no
    ``Queue`` and no store: for a caller that checks many jobs before it writes any (``queue_enqueue
    --file``). ``queues``: the names the ``Queue`` would serve (None: any). ``valid_queues`` and
    ``valid_names``: names already checked, skipped, and where those that pass are remembered (a
    ``Queue``'s caches). Raises what ``put()`` raises; the payload is ``codec.pack_value``'s to check."""
    if type(priority) is not int or not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise InvalidJob(f"priority must be an int from {PRIORITY_MIN} to {PRIORITY_MAX}, not {priority!r}")
    if valid_queues is None or queue not in valid_queues:
        validate_queue_name(queue)
        if queues is not None and queue not in queues:
            raise UnknownQueue(f"unknown queue {queue!r}: this Queue serves {sorted(queues)}")
        if valid_queues is not None:
            _remember(valid_queues, queue)
    if name is not None and (valid_names is None or name not in valid_names):
        validate_name(name)
        if valid_names is not None:
            _remember(valid_names, name)
    if max_retries is not None and (
        type(max_retries) is not int or not 0 <= max_retries <= MAX_RETRIES_LIMIT
    ):
        raise InvalidJob(
            f"max_retries must be None or an int from 0 to {MAX_RETRIES_LIMIT}, not {max_retries!r}"
        )
    if timeout is not None:
        check_number("timeout", timeout, minimum=0.001, error=InvalidJob)
    if partition_key is not None:
        check_partition_key(partition_key)
    if delay is not None or eta is not None:
        ready_at(delay, eta, now)
    if metadata is not None:
        pack_metadata(metadata)  # InvalidMetadata (put() packs it itself: OptionSets.check)


def check_queue_arguments(
    *,
    lease_time: Any,
    max_retries: Any,
    retry_backoff: Any,
    retry_backoff_max: Any,
    result_ttl: Any,
    max_payload_bytes: Any,
    queues: Any,
    recover_interval: Any,
    vacuum_interval: Any,
    sync_interval: Any,
    alert_threshold: Any,
    clock: Any,
    rng: Any,
    worker_id: Any,
) -> frozenset[str] | None:
    """Check the arguments of ``Queue(...)`` that are not the store's: ``ConfigurationError`` naming the
    first bad one. -> the queue names the Queue serves (None: any)."""
    check_number("lease_time", lease_time, minimum=0.001)
    if type(max_retries) is not int or not 0 <= max_retries <= MAX_RETRIES_LIMIT:
        raise ConfigurationError(
            f"max_retries must be an int from 0 to {MAX_RETRIES_LIMIT}, not {max_retries!r}"
        )
    check_number("retry_backoff", retry_backoff, minimum=0)
    check_number("retry_backoff_max", retry_backoff_max, minimum=0)
    check_number("result_ttl", result_ttl, minimum=0)
    check_number("max_payload_bytes", max_payload_bytes, minimum=16, maximum=1 << 30)
    check_number("recover_interval", recover_interval, minimum=0.01)
    check_number("vacuum_interval", vacuum_interval, minimum=0.01)
    check_number("sync_interval", sync_interval, minimum=0.01)
    served = None
    if queues is not None:
        if isinstance(queues, str):
            raise ConfigurationError("queues must be a list of names, not one string")
        try:
            served = frozenset(validate_queue_name(name) for name in queues)
        except InvalidJob as exc:
            raise ConfigurationError(f"queues: {exc}") from None
        except TypeError:
            raise ConfigurationError(f"queues must be a list of names, not {queues!r}") from None
    if clock is not None and not callable(clock):
        raise ConfigurationError(f"clock must be a callable returning unix seconds, not {clock!r}")
    if rng is not None and not callable(getattr(rng, "uniform", None)):
        raise ConfigurationError(f"rng must be a random.Random, not {rng!r}")
    if alert_threshold is not None and (type(alert_threshold) is not int or alert_threshold < 0):
        raise ConfigurationError(f"alert_threshold must be None or an int >= 0, not {alert_threshold!r}")
    if worker_id is not None and (not isinstance(worker_id, str) or not 0 < len(worker_id) <= MAX_NAME
                                  or bad_character(worker_id) is not None):  # fmt: skip
        raise ConfigurationError(
            f"worker_id must be None or a str of 1 to {MAX_NAME} characters without control characters "
            f"or lone surrogates, not {worker_id!r}"
        )
    return served


def _remember(valid: set[str], name: str) -> None:
    """Add to a cache of checked names; names are few in practice, but never let it grow unbounded."""
    if len(valid) > 10_000:
        valid.clear()
    valid.add(name)


def tag_listing(
    given: Any,
    state: Any = None,
    *,
    queue: str | None = None,
    name: str | None = None,
    after: int | None = None,
    limit: int = 50,
) -> tuple[tuple[str, ...], dict[str, Any]]:
    """The checked arguments of a listing by tag (``Queue.tagged``): (the tags, the first as given and the
    rest sorted, the store's keyword arguments); ``InvalidJob`` for no tag, a bad one, a bad filter."""
    if not given:
        raise InvalidJob("a listing by tag needs at least one tag")
    checked = tags.check_tags(list(given))
    first = tags.check_tag(given[0])
    check_filter("queue", queue)
    check_filter("name", name)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidJob(f"limit must be an int >= 1, not {limit!r}")
    if after is not None and (isinstance(after, bool) or not isinstance(after, int) or after < 0):
        raise InvalidJob(f"after must be a job id, not {after!r}")
    options = {"state": None if state is None else parse_state(state), "queue": queue, "name": name,
               "after": after, "limit": limit}  # fmt: skip
    return (first, *(tag for tag in checked if tag != first)), options
