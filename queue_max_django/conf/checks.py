"""What is wrong with ``QUEUE_MAX`` and the store it points at: the system checks, ids
``queue_max_django.E001``... and ``W001``... (docs/reference/checks.md).

``settings_problems()`` is the one judge of the values: ``check_settings`` (registered by apps.py) reports
what it finds, and ``conf.get_config()`` refuses to build a config while it finds an error. The checks of
each kind of store's keys and of the store they point at are that kind's (``storekinds/``: LMDB's read the
disk, PostgreSQL's ask the database server), and create nothing.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core import checks

from ..encryption.checks import encryption_problems, encryption_task_problems
from ..engine import BreakerPolicy, InvalidBreakerPolicy, InvalidRate, parse_rate
from ..engine.concurrency import MAX_N
from ..engine.errors import InvalidJob
from ..engine.job import MAX_SHARDS
from ..engine.validate import (
    MAX_RETRIES_LIMIT,
    MAX_SECONDS,
    bad_character,
    validate_name,
    validate_queue_name,
)
from ..running.registry import registry
from .defaults import DEFAULTS, MIN_LEASE_TIME, NESTED_DEFAULTS, merge_defaults, read_settings
from .problems import PREFIX, Problem, _is_number, _Number, _number_problems, _path, _wrong_type
from .storekinds import STORE_KINDS

TAG = "queue_max_django"  # `manage.py check --tag queue_max_django` runs these checks alone


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
_RATE = 'a rate such as "160/m" or an int per minute'
_QUEUE_NAMES = "a non-empty list of queue names, or None"


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
    found += encryption_problems(values)
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
    """``STORE``, and the keys that say where that store is (and none of another kind's)."""
    kind = STORE_KINDS.get(values["STORE"]) if isinstance(values["STORE"], str) else None
    if kind is None:
        return [
            Problem(
                f"{PREFIX}.E016",
                f"QUEUE_MAX['STORE'] must be {' or '.join(map(repr, STORE_KINDS))}, not {values['STORE']!r}.",
                f"Set STORE to {' or '.join(other.summary for other in STORE_KINDS.values())}, or remove it.",
            )
        ]
    found = [other.foreign_key(key, kind.name) for other in STORE_KINDS.values() if other is not kind
             for key in other.keys if key in raw]  # fmt: skip
    return kind.value_problems(values, base_dir, found)


def problems() -> list[Problem]:
    """Every mistake in the current settings; once the values are valid, also in the store they point at
    (its directory, or its PostgreSQL database)."""
    raw, base_dir = read_settings()
    found = settings_problems(raw, base_dir) + transfer_problems(base_dir)
    if any(problem.is_error for problem in found):
        return found
    values = merge_defaults(raw)
    return found + STORE_KINDS[values["STORE"]].store_problems(values, base_dir)


def transfer_problems(base_dir: Any) -> list[Problem]:
    """E030: the ``QUEUE_MAX_TRANSFER`` setting (the stores ``queue_transfer`` names) is not a dict of
    names to ``QUEUE_MAX``-like dicts, names ``default``, or an entry has an error of its own (its values
    only: nothing on disk or in a database is looked at, as the command opens them only when it runs)."""
    named = getattr(settings, "QUEUE_MAX_TRANSFER", None)
    if named is None:
        return []
    hint = ("Make QUEUE_MAX_TRANSFER a dict of names to dicts like QUEUE_MAX, such as {'old': {'STORE': "
            "'lmdb', 'DATA_DIR': '/srv/app/queue_max_data'}} (docs/reference/settings.md).")  # fmt: skip
    if not isinstance(named, Mapping):
        return [
            Problem(f"{PREFIX}.E030", f"QUEUE_MAX_TRANSFER must be a dict, not {type(named).__name__}.", hint)
        ]
    found = []
    for name, raw in named.items():
        where = f"QUEUE_MAX_TRANSFER[{name!r}]"
        if name == "default" or not isinstance(name, str) or not name:
            why = f"{where}: 'default' names QUEUE_MAX's store, and a name is a non-empty str."
            found.append(Problem(f"{PREFIX}.E030", why, "Give the entry another name."))
            continue
        for problem in settings_problems(raw, base_dir):
            if problem.is_error:
                msg = problem.msg
                msg = msg.replace("QUEUE_MAX", where, 1) if msg.startswith("QUEUE_MAX") else f"{where}: {msg}"
                found.append(Problem(f"{PREFIX}.E030", f"{msg} ({problem.id} of QUEUE_MAX)", problem.hint))
    return found


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
    raw, _base_dir = read_settings()
    encrypted = encryption_task_problems(merge_defaults(raw)) if isinstance(raw, Mapping) else []
    return conflicts + schedules + names + encrypted


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


def check_queue_concurrency(value: Any) -> list[Problem]:
    """``QUEUE_MAX["QUEUE_CONCURRENCY"]``: a dict of queue name -> an int from 1 (E028)."""
    expected = f"a dict of queue name -> an int from 1 to {MAX_N}"
    problem = None
    if not isinstance(value, Mapping):
        problem = f"is {value!r} ({type(value).__name__})"
    else:
        for name, limit in value.items():
            if not isinstance(name, str) or not name or bad_character(name) is not None:
                problem = f"has the key {name!r}, which is not a queue name"
                break
            if type(limit) is not int or not 1 <= limit <= MAX_N:
                problem = f"gives queue {name!r} the limit {limit!r}"
                break
    if problem is None:
        return []
    return [
        Problem(
            f"{PREFIX}.E028",
            f"QUEUE_MAX['QUEUE_CONCURRENCY'] must be {expected}: it {problem}.",
            "Set QUEUE_MAX['QUEUE_CONCURRENCY'] to a dict such as {'media': 8}, or remove it (no limit).",
        )
    ]
