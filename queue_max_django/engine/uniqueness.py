"""Unique keys, the Queue's side: the check of a put's ``unique_key``, ``unique_until`` and ``on_duplicate``
(``InvalidJob`` before anything is written), the key of a call (``call_key``: a task's name and a hash of
its bound arguments), the note a job keeps of its key in its metadata (``job.UNIQUE_NOTE_KEY``), and what a
put tells its caller (``UniquePut``). The store decides each put in its own transaction
(``stores/contract/uniqueness.py``)."""

from __future__ import annotations

import hashlib
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from .errors import InvalidJob
from .job import UNIQUE_NOTE_KEY
from .stores.contract.uniqueness import (
    HOLD_FINISHED,
    HOLD_REMEMBERED,
    HOLD_STARTED,
    HOLD_WINDOW,
    ON_DUPLICATE_RAISE,
    ON_DUPLICATE_REPLACE,
    ON_DUPLICATE_SKIP,
    SCOPE,
    UniqueRule,
)
from .stores.types import UNIQUE_KEY_MIN_TTL, NewJobs, id_bytes
from .validate import MAX_NAME

STARTED, FINISHED = "started", "finished"
SKIP, REPLACE, RAISE = "skip", "replace", "raise"
ON_DUPLICATE = {SKIP: ON_DUPLICATE_SKIP, REPLACE: ON_DUPLICATE_REPLACE, RAISE: ON_DUPLICATE_RAISE}
STORED, SKIPPED, REPLACED = "stored", "skipped", "replaced"
DIGEST_BYTES = 16  # a call key's hash of the arguments: 32 hex digits


@dataclass(frozen=True, slots=True)
class UniquePut:
    """What a put with a unique key did: ``job_id`` (the new job's, or the holder's) and ``outcome``:
    ``"stored"`` (a new job), ``"skipped"`` (a duplicate: nothing stored) or ``"replaced"`` (a duplicate
    whose payload, metadata and ETA the waiting holder took)."""

    job_id: int
    outcome: str

    @property
    def deduplicated(self) -> bool:
        """No new job: the id is the job that held the key."""
        return self.outcome != STORED

    @classmethod
    def of(cls, job_id: int, batch: NewJobs) -> UniquePut:
        return cls(job_id, REPLACED if batch.replaced else SKIPPED if batch.unique_hit else STORED)


def check_until(until: Any) -> tuple[int, float]:
    """``unique_until`` -> (hold, window in seconds). None: the engine's remembered key (periodic ticks)."""
    if until is None:
        return HOLD_REMEMBERED, 0.0
    if isinstance(until, str):
        if until == STARTED:
            return HOLD_STARTED, 0.0
        if until == FINISHED:
            return HOLD_FINISHED, 0.0
    elif (
        isinstance(until, (int, float)) and not isinstance(until, bool) and math.isfinite(until) and until > 0
    ):
        return HOLD_WINDOW, float(until)
    raise InvalidJob(
        f"unique_until must be 'started', 'finished' or a number of seconds > 0 (a window from the first "
        f"job's enqueue), not {until!r}"
    )


def check_on_duplicate(on_duplicate: Any) -> int:
    code = ON_DUPLICATE.get(on_duplicate) if isinstance(on_duplicate, str) else None
    if code is None:
        raise InvalidJob(f"on_duplicate must be 'skip', 'replace' or 'raise', not {on_duplicate!r}")
    return code


def check_options(until: Any, on_duplicate: Any) -> None:
    """``unique_until`` and ``on_duplicate`` as ``@task``/``.using()`` take them (``InvalidJob``), before any
    key is known. ``unique_until`` None is the engine's own (periodic ticks), not a task's."""
    if until is None:
        raise InvalidJob("unique_until must be 'started', 'finished' or a number of seconds > 0, not None")
    check_until(until)
    check_on_duplicate(on_duplicate)


def rule(key: Any, until: Any, on_duplicate: Any, result_ttl: float) -> UniqueRule:
    """The store's rule of a put with ``unique_key=key``: ``InvalidJob`` for a key that is not a str of 1 to
    ``MAX_NAME`` characters fitting a store key, an unknown ``until`` or ``on_duplicate``, or a window longer
    than the store keeps keys (``max(result_ttl, UNIQUE_KEY_MIN_TTL)``: a key never outlives that)."""
    encoded = id_bytes("unique_key", key, MAX_NAME)
    hold, window = check_until(until)
    longest = max(result_ttl, UNIQUE_KEY_MIN_TTL)
    if window > longest:
        raise InvalidJob(
            f"unique_until={until!r} s is longer than the store keeps unique keys (max(result_ttl, one day) "
            f"= {longest:g} s): shorten the window or raise the result TTL"
        )
    return UniqueRule(encoded, hold, int(window * 1_000_000), check_on_duplicate(on_duplicate))


def scoped(unique: UniqueRule, route: str) -> UniqueRule:
    """``unique`` judged among the jobs placed by ``route`` (a job's concurrency ``route_key``): its key
    becomes ``SCOPE + route + SCOPE + key``, so that the check meets the write on the limits' shard and two
    jobs with one key but different placements are not each other's duplicates, on every store alike.
    ``InvalidJob`` when the two together pass a store key's size."""
    text = unique.key.decode()
    key = id_bytes("unique_key with its concurrency key", SCOPE + route + SCOPE + text, 2 * MAX_NAME + 2)
    return UniqueRule(key, unique.hold, unique.window_us, unique.on_duplicate)


def noted(metadata: Any, key: str, until: Any, on_duplicate: str) -> Any:
    """``metadata`` with the job's note of its key (``job.UniqueNote``), for the admin and ``queue_show``:
    ``{"_unique": {"key", "until", "on_duplicate"}}``. A periodic tick's (``until`` None) is left as it is,
    and so is metadata that is not a dict (its check refuses it)."""
    if until is None or not (metadata is None or isinstance(metadata, dict)):
        return metadata
    note = {"key": key, "until": until, "on_duplicate": on_duplicate}
    return {**(metadata or {}), UNIQUE_NOTE_KEY: note}


def distinct_for_raise(keys: Sequence[Any], on_duplicate: Any) -> None:
    """A batch put with ``on_duplicate="raise"`` holds each key once (``InvalidJob`` naming two items that
    share one): a duplicate within the batch would raise naming a job that its own rollback undoes."""
    if on_duplicate != RAISE:
        return
    first: dict[Any, int] = {}
    for index, key in enumerate(keys):
        if key in first:
            raise InvalidJob(
                f"items {first[key]} and {index} have the same unique key {key!r}, with "
                f"on_duplicate='raise': nothing was stored"
            )
        first[key] = index


# ------------------------------------------------------------------------------------------ keys of a call


def call_key(name: str, signature: inspect.Signature, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """``unique_key=True``: the task's name and a hash of the call's arguments bound to its signature, with
    the defaults applied (``f(1)``, ``f(x=1)`` and ``f(1, y=<default>)`` give one key), in a canonical
    msgpack form (dict keys sorted by their encoding, tuples as lists). A name too long to leave room for
    the hash is itself hashed."""
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    encoded = msgpack.packb(canonical(dict(bound.arguments)), use_bin_type=True)
    digest = hashlib.blake2b(encoded, digest_size=DIGEST_BYTES).hexdigest()
    label = name
    if len(name) + 1 + len(digest) > MAX_NAME:
        label = hashlib.blake2b(name.encode(), digest_size=DIGEST_BYTES).hexdigest()
    return f"{label}:{digest}"


def canonical(value: Any) -> Any:
    """``value`` (msgpack data) in a form whose encoding depends on its content alone: dicts in the order
    of their keys' encodings, tuples as lists, subclasses of the base types as the base types."""
    if isinstance(value, Mapping):
        items = [(canonical(k), canonical(v)) for k, v in value.items()]
        items.sort(key=lambda item: msgpack.packb(item[0], use_bin_type=True))
        return dict(items)
    if isinstance(value, (list, tuple)):
        return [canonical(item) for item in value]
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bytes):
        return bytes(value)
    return value


def key_of(
    given: str | bool | Callable[..., Any],
    name: str,
    signature: inspect.Signature,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> str:
    """The unique key of one call, as ``@task(unique_key=given)`` makes it: ``given`` itself (a str), the
    call's key (True: ``call_key``), or what ``given`` (a callable) returns when called with the call's
    arguments: ``InvalidJob`` if it raises, or returns anything but a str of 1 to ``MAX_NAME`` characters."""
    if given is True:
        return call_key(name, signature, args, kwargs)
    if isinstance(given, str):
        return given
    try:
        key = given(*args, **kwargs)  # type: ignore[operator]
    except Exception as exc:
        raise InvalidJob(
            f"the unique_key function of task {name!r} raised {type(exc).__name__}: {exc}; nothing was stored"
        ) from exc
    if not isinstance(key, str):
        raise InvalidJob(
            f"the unique_key function of task {name!r} must return a str, not {type(key).__name__} "
            f"({key!r}); nothing was stored"
        )
    id_bytes("unique_key", key, MAX_NAME)
    return key


def check_key_option(given: Any) -> None:
    """``@task(unique_key=...)``/``.using()``: None, True, a non-empty str within the limits, or a
    callable."""
    if given is None or given is True or callable(given):
        return
    if isinstance(given, str):
        id_bytes("unique_key", given, MAX_NAME)
        return
    raise InvalidJob(
        f"unique_key must be a str, True (the task's name and its arguments) or a function of the call's "
        f"arguments returning a str, not {given!r}"
    )
