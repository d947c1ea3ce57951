"""What is wrong with ``QUEUE_MAX`` and the store it points at: the system checks, ids
``queue_max_django.E001``... and ``W001``... (docs/reference/checks.md).

``settings_problems()`` is the one judge of the values: ``check_settings`` (registered by apps.py) reports
what it finds, and ``conf.get_config()`` refuses to build a config while it finds an error. The store checks
read the disk (LMDB) or ask the database server (PostgreSQL: postgres_checks.py) and create nothing.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from django.apps import AppConfig
from django.core import checks

from . import postgres_checks
from .concurrency import check_queue_concurrency
from .defaults import (
    DATA_DIR_NAME,
    DEFAULTS,
    LMDB_KEYS,
    MIN_LEASE_TIME,
    NESTED_DEFAULTS,
    POSTGRES_KEYS,
    STORES,
    merge_defaults,
    read_settings,
    resolve_data_dir,
)
from .engine import BreakerPolicy, InvalidBreakerPolicy, InvalidRate, parse_rate
from .engine.errors import InvalidJob
from .engine.job import MAX_SHARDS
from .engine.stores.lmdb.store import LmdbStore
from .engine.stores.opening import URL_SCHEMES
from .engine.validate import MAX_RETRIES_LIMIT, MAX_SECONDS, validate_name, validate_queue_name
from .problems import PREFIX, Problem
from .registry import registry

TAG = "queue_max_django"  # `manage.py check --tag queue_max_django` runs these checks alone


@dataclass(frozen=True)
class _Number:
    kind: Literal["int", "seconds"]
    minimum: float
    maximum: float | None
    optional: bool = False

    @property
    def description(self) -> str:
        text = "an int" if self.kind == "int" else "a number of seconds"
        return f"{text} or None" if self.optional else text


_NUMBERS: Mapping[str, _Number] = {
    "SHARDS": _Number("int", 1, MAX_SHARDS, optional=True),
    "LEASE_TIME": _Number("seconds", MIN_LEASE_TIME, MAX_SECONDS),  # what the worker can renew in time
    "MAX_RETRIES": _Number("int", 0, MAX_RETRIES_LIMIT),
    "RETRY_BACKOFF": _Number("seconds", 0, MAX_SECONDS),
    "RETRY_BACKOFF_MAX": _Number("seconds", 0, MAX_SECONDS),
    "RESULT_TTL": _Number("seconds", 0, MAX_SECONDS),
    "MAX_PAYLOAD_BYTES": _Number("int", 16, 1 << 30),
    "ALERT_THRESHOLD": _Number("int", 0, None, optional=True),
    "TIMEOUT": _Number("seconds", 0.001, MAX_SECONDS, optional=True),
    "UNKNOWN_TASK_GRACE": _Number("seconds", 0, MAX_SECONDS),
}
_WORKER_NUMBERS: Mapping[str, _Number] = {
    "PROCESSES": _Number("int", 1, 1024, optional=True),
    "THREADS": _Number("int", 1, 1024),
    "SHUTDOWN_TIMEOUT": _Number("seconds", 0, MAX_SECONDS),
    "MAX_JOBS": _Number("int", 1, None, optional=True),
    "MAX_MEMORY_MB": _Number("int", 1, None, optional=True),
    "BURST_WAIT": _Number("seconds", 0, MAX_SECONDS),
    "CANCEL_GRACE": _Number("seconds", 0, MAX_SECONDS),
}
_BOOLS = ("SYNC", "IMMEDIATE", "ENQUEUE_ON_COMMIT")
# The PostgreSQL store's waits: the longest poll-only sleep; above 1 s it would change nothing (every idle
# wait of the engine is bounded by 1 s, engine/queue.py MAX_IDLE_WAIT).
_POLL_INTERVAL = _Number("seconds", 0.005, 1.0)
_URL = "a postgresql:// or postgres:// URL (str), or None"
_RATE = 'a rate such as "160/m" or an int per minute'
_QUEUE_NAMES = "a non-empty list of queue names, or None"


def _fmt(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else repr(number)


def _path(*keys: object) -> str:
    return "QUEUE_MAX" + "".join(f"[{key!r}]" for key in keys)


def _default_text(keys: tuple[str, ...]) -> str:
    if keys == ("DATA_DIR",):
        return f"BASE_DIR / {DATA_DIR_NAME!r}"
    value: Any = DEFAULTS
    for key in keys:
        value = value[key]
    return repr(dict(value) if isinstance(value, Mapping) else value)


def _or_remove(keys: tuple[str, ...]) -> str:
    if keys[0] == "QUEUE_RATE_LIMITS" and len(keys) == 2:
        return "or remove it to leave that queue without a limit of its own"
    return f"or remove it to use the default ({_default_text(keys)})"


def _wrong_type(keys: tuple[str, ...], value: Any, expected: str) -> Problem:
    return Problem(
        f"{PREFIX}.E003",
        f"{_path(*keys)} must be {expected}, not {value!r} ({type(value).__name__}).",
        f"Set {_path(*keys)} to {expected}, {_or_remove(keys)}.",
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number_problems(keys: tuple[str, ...], value: Any, spec: _Number) -> list[Problem]:
    if value is None and spec.optional:
        return []
    if not _is_number(value) or (spec.kind == "int" and not isinstance(value, int)):
        return [_wrong_type(keys, value, spec.description)]
    low, high = spec.minimum, spec.maximum
    if math.isfinite(value) and low <= value and (high is None or value <= high):
        return []
    span = f"at least {_fmt(low)}" if high is None else f"from {_fmt(low)} to {_fmt(high)}"
    return [
        Problem(
            f"{PREFIX}.E004",
            f"{_path(*keys)} must be {span}, not {value!r}.",
            f"Set {_path(*keys)} to a value in that range, {_or_remove(keys)}.",
        )
    ]


def _unknown_keys(keys: tuple[str, ...], given: Mapping[Any, Any], known: Mapping[str, Any]) -> list[Problem]:
    found: list[Problem] = []
    for key in given:
        if key in known:
            continue
        close = difflib.get_close_matches(str(key).upper(), list(known), n=1)
        advice = f"Did you mean {close[0]!r}? " if close else ""
        found.append(
            Problem(
                f"{PREFIX}.E002",
                f"{_path(*keys)} has an unknown key {key!r}.",
                f"{advice}Remove it or correct its name: every key is listed in docs/reference/settings.md.",
            )
        )
    return found


def _queue_name_problems(keys: tuple[str, ...], value: Any) -> list[Problem]:
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or not value:
        return [_wrong_type(keys, value, _QUEUE_NAMES)]
    return [p for name in value for p in _bad_queue_name(keys, name)]


def _bad_queue_name(keys: tuple[str, ...], name: Any) -> list[Problem]:
    try:
        validate_queue_name(name)
    except InvalidJob as exc:
        return [
            Problem(
                f"{PREFIX}.E005",
                f"{_path(*keys)} holds an invalid queue name {name!r}: {exc}.",
                "Use names of 1 to 100 characters without control characters.",
            )
        ]
    return []


def _rate_problems(keys: tuple[str, ...], value: Any, *, optional: bool) -> list[Problem]:
    if value is None and optional:
        return []
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        return [_wrong_type(keys, value, f"{_RATE}, or None" if optional else _RATE)]
    try:
        parse_rate(value)
    except InvalidRate as exc:
        return [
            Problem(
                f"{PREFIX}.E006",
                f"{_path(*keys)} is not a valid rate: {exc}.",
                'Write "<count>/<unit>" with unit s, m, h or d ("160/m", "10/s", "10/5s"), or a positive '
                "int per minute.",
            )
        ]
    return []


def _breaker_problems(breaker: Mapping[str, Any]) -> list[Problem]:
    threshold, timeout = breaker["THRESHOLD"], breaker["TIMEOUT"]
    found: list[Problem] = []
    if isinstance(threshold, bool) or not isinstance(threshold, int):
        found.append(_wrong_type(("CIRCUIT_BREAKER", "THRESHOLD"), threshold, "an int"))
    if not _is_number(timeout):
        found.append(_wrong_type(("CIRCUIT_BREAKER", "TIMEOUT"), timeout, "a number of seconds"))
    if found:
        return found
    for key, policy in (("THRESHOLD", {"threshold": threshold}), ("TIMEOUT", {"recovery_timeout": timeout})):
        try:
            BreakerPolicy(**policy)
        except InvalidBreakerPolicy as exc:
            found.append(
                Problem(
                    f"{PREFIX}.E007",
                    f"{_path('CIRCUIT_BREAKER', key)} is out of range: {exc}.",
                    "THRESHOLD counts consecutive failures (at least 1); TIMEOUT is the seconds before a "
                    "trial job (above 0).",
                )
            )
    return found


def _unlisted_queue_problems(keys: tuple[str, ...], names: Any, queues: tuple[str, ...]) -> list[Problem]:
    return [
        Problem(
            f"{PREFIX}.W001",
            f"{_path(*keys)} names the queue {name!r}, which is not in QUEUE_MAX['QUEUES'].",
            f"Add {name!r} to QUEUE_MAX['QUEUES'] or remove it here: no job can be put in a queue outside "
            f"QUEUES.",
        )
        for name in names
        if name not in queues
    ]


def _data_dir_problems(value: Any, base_dir: Any) -> list[Problem]:
    if value is not None and (
        not isinstance(value, (str, os.PathLike))
        or not isinstance(os.fspath(value), str)
        or not os.fspath(value).strip()  # "" is what an unset environment variable gives
        or "\x00" in os.fspath(value)
    ):
        return [_wrong_type(("DATA_DIR",), value, "a path (a non-empty str or a pathlib.Path)")]
    path = resolve_data_dir(value, base_dir)
    if path is None:
        return [
            Problem(
                f"{PREFIX}.E008",
                "QUEUE_MAX['DATA_DIR'] is not set and the settings have no BASE_DIR to put it under.",
                "Set QUEUE_MAX['DATA_DIR'] to the directory of the job store (an absolute path), or set "
                "BASE_DIR.",
            )
        ]
    if not path.is_absolute():
        return [
            Problem(
                f"{PREFIX}.W002",
                f"QUEUE_MAX['DATA_DIR'] is a relative path ({os.fspath(path)!r}): each process would open "
                f"the store under its own working directory.",
                "Use an absolute path, such as BASE_DIR / 'queue_max_data'.",
            )
        ]
    return []


def settings_problems(raw: Any, base_dir: Any) -> list[Problem]:
    """Every mistake in the ``QUEUE_MAX`` value ``raw`` (with the project's ``BASE_DIR``), in key order.

    The values only: nothing on disk is looked at (``store_problems`` does that)."""
    if not isinstance(raw, Mapping):
        return [
            Problem(
                f"{PREFIX}.E001",
                f"QUEUE_MAX must be a dict, not {type(raw).__name__}.",
                "Set QUEUE_MAX to a dict of the keys in docs/reference/settings.md, or remove it to use the "
                "defaults.",
            )
        ]
    found = _unknown_keys((), raw, DEFAULTS)
    values = merge_defaults(raw)
    found += _store_problems(raw, values, base_dir)
    for key, spec in _NUMBERS.items():
        found += _number_problems((key,), values[key], spec)
    for key in _BOOLS:
        if not isinstance(values[key], bool):
            found.append(_wrong_type((key,), values[key], "True or False"))
    queues = values["QUEUES"]
    found += _queue_name_problems(("QUEUES",), queues)
    listed = tuple(queues) if isinstance(queues, (list, tuple)) and queues else None
    found += _rate_problems(("RATE_LIMIT",), values["RATE_LIMIT"], optional=True)
    limits = values["QUEUE_RATE_LIMITS"]
    if isinstance(limits, Mapping):
        for name, rate in limits.items():
            found += _bad_queue_name(("QUEUE_RATE_LIMITS",), name)
            found += _rate_problems(("QUEUE_RATE_LIMITS", name), rate, optional=False)
        if listed is not None:
            found += _unlisted_queue_problems(("QUEUE_RATE_LIMITS",), limits, listed)
    else:
        found.append(_wrong_type(("QUEUE_RATE_LIMITS",), limits, f"a dict of queue name -> {_RATE}"))
    found += check_queue_concurrency(values["QUEUE_CONCURRENCY"])
    for key, defaults in NESTED_DEFAULTS.items():
        if not isinstance(values[key], Mapping):
            found.append(_wrong_type((key,), raw[key], "a dict"))
            continue
        found += _unknown_keys((key,), raw.get(key, {}), defaults)
    if isinstance(values["CIRCUIT_BREAKER"], Mapping):
        found += _breaker_problems(values["CIRCUIT_BREAKER"])
    worker = values["WORKER"]
    if isinstance(worker, Mapping):
        for key, spec in _WORKER_NUMBERS.items():
            found += _number_problems(("WORKER", key), worker[key], spec)
        found += _queue_name_problems(("WORKER", "QUEUES"), worker["QUEUES"])
        if listed is not None and isinstance(worker["QUEUES"], (list, tuple)):
            found += _unlisted_queue_problems(("WORKER", "QUEUES"), worker["QUEUES"], listed)
    found += _metrics_token_problems(values["METRICS_TOKEN"])
    return found


MIN_TOKEN_CHARS = 16  # METRICS_TOKEN: a shorter one is guessable


def _metrics_token_problems(token: Any) -> list[Problem]:
    """``METRICS_TOKEN``: None, or at least ``MIN_TOKEN_CHARS`` printable ASCII characters without spaces
    (what an ``Authorization: Bearer`` header can carry)."""
    if token is None:
        return []
    if isinstance(token, str) and len(token) >= MIN_TOKEN_CHARS and all("!" <= c <= "~" for c in token):
        return []
    # the value itself is never shown: it may be most of a real token
    kind = type(token).__name__
    shown = f"{len(token)} characters" if isinstance(token, str) else f"a value of type {kind}"
    return [
        Problem(
            f"{PREFIX}.E026",
            f"QUEUE_MAX['METRICS_TOKEN'] must be None or a string of at least {MIN_TOKEN_CHARS} printable "
            f"ASCII characters without spaces, not {shown}.",
            "Generate one with `python -c 'import secrets; print(secrets.token_urlsafe(32))'` and read it "
            "from the environment, or remove the key (then only users with the view permission of the "
            "jobs may read the metrics).",
        )
    ]


def _store_problems(raw: Mapping[str, Any], values: Mapping[str, Any], base_dir: Any) -> list[Problem]:
    """``STORE``, and the keys that say where that store is (and none of the other store's)."""
    kind = values["STORE"]
    if not isinstance(kind, str) or kind not in STORES:
        return [
            Problem(
                f"{PREFIX}.E016",
                f"QUEUE_MAX['STORE'] must be 'lmdb' or 'postgresql', not {kind!r}.",
                "Set STORE to 'lmdb' (the embedded store in DATA_DIR, the default) or 'postgresql' (tables "
                "in a PostgreSQL database: DATABASE or URL), or remove it.",
            )
        ]
    if kind == "lmdb":
        found = [_other_store_key(key, "PostgreSQL", kind) for key in POSTGRES_KEYS if key in raw]
        return found + _data_dir_problems(values["DATA_DIR"], base_dir)
    found = [_other_store_key(key, "LMDB", kind) for key in LMDB_KEYS if key in raw]
    database = values["DATABASE"]
    if database is not None and (not isinstance(database, str) or not database):
        found.append(_wrong_type(("DATABASE",), database, "a DATABASES alias (a non-empty str), or None"))
    url = values["URL"]
    if url is not None and (not isinstance(url, str) or not url.startswith(URL_SCHEMES)):
        found.append(_wrong_type(("URL",), url, _URL))
    if not isinstance(values["NOTIFY"], bool):
        found.append(_wrong_type(("NOTIFY",), values["NOTIFY"], "True or False"))
    found += [_wrong_type((key,), values[key], "True, False or None")
              for key in ("LISTEN", "TRANSACTION_POOLING")
              if values[key] is not None and not isinstance(values[key], bool)]  # fmt: skip
    found += _number_problems(("POLL_INTERVAL",), values["POLL_INTERVAL"], _POLL_INTERVAL)
    if found:
        return found
    return postgres_checks.settings_problems(values)


def _other_store_key(key: str, owner: str, kind: str) -> Problem:
    if owner == "LMDB":
        return Problem(
            f"{PREFIX}.E017",
            f"QUEUE_MAX[{key!r}] is for the LMDB store, but QUEUE_MAX['STORE'] is {kind!r}.",
            f"Remove {key}: the PostgreSQL store keeps its jobs in the database that DATABASE or URL names, "
            f"and DATA_DIR, SHARDS and SYNC do not apply to it (its durability is PostgreSQL's "
            f"synchronous_commit).",
        )
    return Problem(
        f"{PREFIX}.E018",
        f"QUEUE_MAX[{key!r}] is for the PostgreSQL store, but QUEUE_MAX['STORE'] is {kind!r}"
        f"{' (the default)' if kind == DEFAULTS['STORE'] else ''}.",
        f"Set QUEUE_MAX['STORE'] to 'postgresql' to keep the jobs in PostgreSQL, or remove {key}.",
    )


def store_problems(data_dir: Path, shards: int | None) -> list[Problem]:
    """What stands between ``data_dir`` and a store the engine can open with ``shards``. Creates nothing."""
    if data_dir.exists() and not data_dir.is_dir():
        return [
            Problem(
                f"{PREFIX}.E009",
                f"QUEUE_MAX['DATA_DIR'] ({os.fspath(data_dir)!r}) exists and is not a directory.",
                "Point DATA_DIR at a directory (it is created if missing), or move that file away.",
            )
        ]
    existing = data_dir.absolute()
    while not existing.exists():
        existing = existing.parent
    if not os.access(existing, os.R_OK | os.W_OK | os.X_OK):
        return [
            Problem(
                f"{PREFIX}.E010",
                f"QUEUE_MAX['DATA_DIR'] ({os.fspath(data_dir)!r}) is not writable: this process lacks read, "
                f"write or search permission on {os.fspath(existing)!r}.",
                "Give the user that runs Django and the workers write access there, or choose another "
                "DATA_DIR.",
            )
        ]
    problem = LmdbStore.unopenable(os.fspath(data_dir), shards)
    if problem is None:
        return []
    if problem.foreign is not None:
        return [_not_our_store(data_dir, problem.foreign)]
    if problem.shards_on_disk is not None:
        on_disk = problem.shards_on_disk
        return [
            Problem(
                f"{PREFIX}.E011",
                f"QUEUE_MAX['SHARDS'] is {shards}, but the store at {os.fspath(data_dir)!r} has "
                f"{on_disk} shards.",
                f"Set SHARDS to {on_disk} or None (the count on disk). To change the shard count, drain "
                f"this store and point DATA_DIR at a new directory.",
            )
        ]
    return []


def _not_our_store(data_dir: Path, reason: str) -> Problem:
    return Problem(
        f"{PREFIX}.E012",
        f"QUEUE_MAX['DATA_DIR'] ({os.fspath(data_dir)!r}) holds a store this version cannot open: "
        f"{reason.rstrip('.')}.",
        "Point DATA_DIR at an empty or new directory, or drain the old store with the version that wrote it.",
    )


def problems() -> list[Problem]:
    """Every mistake in the current settings; once the values are valid, also in the store they point at
    (its directory, or its PostgreSQL database)."""
    raw, base_dir = read_settings()
    found = settings_problems(raw, base_dir)
    if any(problem.is_error for problem in found):
        return found
    values = merge_defaults(raw)
    if values["STORE"] == "postgresql":
        return found + postgres_checks.database_problems(values)
    data_dir = resolve_data_dir(raw.get("DATA_DIR"), base_dir)
    assert data_dir is not None  # E008 otherwise
    return found + store_problems(data_dir, raw.get("SHARDS"))


def task_problems() -> list[Problem]:
    """Mistakes in this process's task registry: each task name claimed by two functions, then each
    periodic task whose schedule does not parse, then each task name the engine would refuse."""
    conflicts = [
        Problem(
            f"{PREFIX}.E013",
            f"The task name {name!r} is registered twice: by {first} and by {second}. Jobs of that name "
            f"run {first}, even those enqueued through {second}.",
            f"Give one of them another name: @task(name=...) on {first} or on {second}.",
        )
        for name, first, second in registry.conflicts()
    ]
    schedules = [
        Problem(
            f"{PREFIX}.E014",
            f"The periodic task {name!r} has a schedule that does not parse: {error}. It is not scheduled.",
            "Give @periodic_task interval= (a positive number of seconds) or cron= (five fields: minute hour "
            'day-of-month month day-of-week, such as "*/15 * * * *").',
        )
        for name, error in _schedule_errors()
    ]
    names = [
        Problem(
            f"{PREFIX}.E015",
            f"The task name {name!r} cannot name a job: {exc}.",
            "Give the task a name= of 1 to 200 characters without control characters (newlines, escapes) "
            "or lone surrogates.",
        )
        for name, exc in _bad_task_names(registry.names())
    ]
    return conflicts + schedules + names


def _schedule_errors() -> list[tuple[str, str]]:
    """(name, why) of each periodic task whose schedule did not parse, by name: what
    ``periodic.unscheduled_periodic_tasks()`` lists, read from the registry without importing periodic.py
    (it imports tasks.py, which imports conf.py, which imports this module). Such a task is the registered
    task that has a ``schedule_error``."""
    found = []
    for name in registry.names():
        error = getattr(registry.get(name), "schedule_error", None)
        if error is not None:
            found.append((name, str(error)))
    return found


def _bad_task_names(names: list[str]) -> list[tuple[str, InvalidJob]]:
    found = []
    for name in names:
        try:
            validate_name(name)
        except InvalidJob as exc:
            found.append((name, exc))
    return found


def check_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """The system check: one message per mistake in ``QUEUE_MAX``, in the store it points at, and in the
    task registry."""
    return [
        (checks.Error if problem.is_error else checks.Warning)(problem.msg, hint=problem.hint, id=problem.id)
        for problem in problems() + task_problems()
    ]
