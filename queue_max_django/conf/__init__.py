"""``QUEUE_MAX`` -> a frozen ``QueueMaxConfig`` -> the process's engine ``Queue``.

This module is the only door from the Django layer to the engine's store: the embedded LMDB store in
``DATA_DIR`` (the default), or with ``STORE = "postgresql"`` the PostgreSQL store in the database of a
``DATABASES`` alias or a ``URL``; what differs by kind of store is asked of the kind the settings name
(``storekinds/``: ``STORE_KINDS``). The package holds the rest of the configuration: the defaults
(``defaults.py``), the system checks (``checks.py``, ``problems.py``) and a store of its own for a test run
(``teststore.py``). Settings are read lazily (never at import time), cached, and forgotten on Django's
``setting_changed`` signal, so ``override_settings`` works. A config is built only from values that the
system checks (checks.py) find no error in.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import socket
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.db import DEFAULT_DB_ALIAS
from django.dispatch import receiver

from ..commits import OPEN, Commit
from ..engine import GLOBAL_KEY, QUEUE_KEY_PREFIX, Queue, Rate, parse_rate
from ..engine.sealing import parse_keys
from ..signals import connect
from . import teststore
from .checks import settings_problems
from .defaults import DEFAULTS, merge_defaults, read_settings
from .storekinds import STORE_KINDS

if TYPE_CHECKING:
    from ..engine.stores.base import Store
    from .storekinds.postgresql.config import PostgresConfig

logger = logging.getLogger("queue_max_django")

__all__ = [
    "Applied",
    "CircuitBreakerConfig",
    "QueueMaxConfig",
    "WorkerConfig",
    "build_config",
    "caller_connection",
    "callers_alias",
    "get_config",
    "get_queue",
    "lent_to",
    "require_installed",
    "reset",
    "store_class",
    "store_connection",
    "upgrade_after_migrate",
]


@dataclass(frozen=True)
class CircuitBreakerConfig:
    """``QUEUE_MAX["CIRCUIT_BREAKER"]``: the policy of a task decorated with ``circuit_breaker=True``."""

    threshold: int
    timeout: float


@dataclass(frozen=True)
class WorkerConfig:
    """``QUEUE_MAX["WORKER"]``: the defaults of the ``queue_worker`` command's options."""

    processes: int | None
    threads: int
    queues: tuple[str, ...] | None
    shutdown_timeout: float
    max_jobs: int | None
    max_memory_mb: int | None
    burst_wait: float
    cancel_grace: float = 10.0  # seconds a running job that was cancelled has to stop before it is ended


@dataclass(frozen=True)
class QueueMaxConfig:
    """``QUEUE_MAX`` merged over ``DEFAULTS``, checked and typed (docs/reference/settings.md)."""

    data_dir: Path | None  # None with the PostgreSQL store
    shards: int | None
    lease_time: float
    max_retries: int
    retry_backoff: float
    retry_backoff_max: float
    result_ttl: float
    max_payload_bytes: int
    sync: bool
    queues: tuple[str, ...] | None
    rate_limit: Rate | None
    queue_rate_limits: Mapping[str, Rate]
    queue_concurrency: Mapping[str, int]
    circuit_breaker: CircuitBreakerConfig
    alert_threshold: int | None
    timeout: float | None
    immediate: bool
    enqueue_on_commit: bool
    worker: WorkerConfig
    store: str = "lmdb"
    postgres: PostgresConfig | None = None  # with store "postgresql"
    unknown_task_grace: float = DEFAULTS["UNKNOWN_TASK_GRACE"]  # seconds (runner.unknown_task_wait)
    metrics_token: str | None = None  # METRICS_TOKEN: a bearer token that may read the metrics view
    encrypt: bool = False  # ENCRYPT: every task's jobs encrypted (encryption/)
    encryption_keys: tuple[tuple[str, bytes], ...] = ()  # ENCRYPTION_KEYS: (id, key), the sealing one first


def build_config(raw: Mapping[str, Any], base_dir: Any) -> QueueMaxConfig:
    """The config of a ``QUEUE_MAX`` value; ``ImproperlyConfigured`` naming the check ids of its errors."""
    errors = [problem for problem in settings_problems(raw, base_dir) if problem.is_error]
    if errors:
        lines = "\n".join(f"{p.id}: {p.msg} HINT: {p.hint}" for p in errors)
        raise ImproperlyConfigured(f"QUEUE_MAX is misconfigured (see `manage.py check`):\n{lines}")
    values = merge_defaults(raw)
    breaker, worker = values["CIRCUIT_BREAKER"], values["WORKER"]
    rate = values["RATE_LIMIT"]
    return QueueMaxConfig(
        shards=values["SHARDS"],
        lease_time=float(values["LEASE_TIME"]),
        max_retries=values["MAX_RETRIES"],
        retry_backoff=float(values["RETRY_BACKOFF"]),
        retry_backoff_max=float(values["RETRY_BACKOFF_MAX"]),
        result_ttl=float(values["RESULT_TTL"]),
        max_payload_bytes=values["MAX_PAYLOAD_BYTES"],
        sync=values["SYNC"],
        queues=_names(values["QUEUES"]),
        rate_limit=None if rate is None else parse_rate(rate),
        queue_rate_limits=MappingProxyType(
            {name: parse_rate(spec) for name, spec in values["QUEUE_RATE_LIMITS"].items()}
        ),
        queue_concurrency=MappingProxyType(dict(values["QUEUE_CONCURRENCY"])),
        circuit_breaker=CircuitBreakerConfig(breaker["THRESHOLD"], float(breaker["TIMEOUT"])),
        alert_threshold=values["ALERT_THRESHOLD"],
        timeout=None if values["TIMEOUT"] is None else float(values["TIMEOUT"]),
        immediate=values["IMMEDIATE"],
        enqueue_on_commit=values["ENQUEUE_ON_COMMIT"],
        worker=WorkerConfig(
            processes=worker["PROCESSES"],
            threads=worker["THREADS"],
            queues=_names(worker["QUEUES"]),
            shutdown_timeout=float(worker["SHUTDOWN_TIMEOUT"]),
            max_jobs=worker["MAX_JOBS"],
            max_memory_mb=worker["MAX_MEMORY_MB"],
            burst_wait=float(worker["BURST_WAIT"]),
            cancel_grace=float(worker["CANCEL_GRACE"]),
        ),
        store=values["STORE"],
        unknown_task_grace=float(values["UNKNOWN_TASK_GRACE"]),
        metrics_token=values["METRICS_TOKEN"],
        encrypt=values["ENCRYPT"],
        encryption_keys=tuple(parse_keys(values["ENCRYPTION_KEYS"])) if values["ENCRYPTION_KEYS"] else (),
        **STORE_KINDS[values["STORE"]].config(values, base_dir),  # data_dir, postgres
    )


def _names(value: list[str] | tuple[str, ...] | None) -> tuple[str, ...] | None:
    return None if value is None else tuple(value)


def lent_to(queue: Queue, joined: Any | None) -> contextlib.AbstractContextManager[None]:
    """Inside the block, this thread's operations of ``queue`` run on ``joined`` (what
    ``caller_connection()`` returned: the caller's connection in its transaction), or on the store's own
    connections when it is None."""
    return _NOT_LENT if joined is None else queue.on_connection(joined)


_NOT_LENT = contextlib.nullcontext()


class Applied:
    """Settings this process keeps in a ``Queue``'s store (rate limits, a task's breaker), looked at once per
    Queue rather than at every use: ``apply(queue, joined, fn)`` runs ``fn(write)``, which reads them in the
    store, writes them where they differ if ``write``, and says whether they differed.

    Inside the caller's transaction (``joined``, the caller's connection) they are only read, on it. Where
    they differ they are written right after that transaction commits, on the store's own connection
    (a ``Commit`` callback; ``commits.flush()`` runs it too): not in the caller's transaction, whose writes
    would hold the rows every worker's admission locks (a flow write's version row) for as long as it lasts,
    and which the same thread's next flow write on the store's own connection would wait for forever. Until
    that commit nobody looks again; after a rollback nothing was written, and the next use looks again. A
    write after the commit that fails is logged, and the next use looks again."""

    def __init__(self) -> None:
        self._queue: weakref.ref[Queue] | None = None  # the Queue they are known to be applied to
        self._pending: tuple[weakref.ref[Queue], Commit] | None = None  # written at that commit

    def due(self, queue: Queue) -> bool:
        """Are they to be looked at before ``queue`` is used?"""
        if self._queue is not None and self._queue() is queue:
            return False
        pending = self._pending
        return pending is None or pending[0]() is not queue or pending[1].state != OPEN

    def apply(self, queue: Queue, joined: Any | None, fn: Callable[[bool], bool]) -> None:
        if joined is None:
            fn(True)
            self._queue = weakref.ref(queue)
            return
        with lent_to(queue, joined):
            differ = fn(False)
        if not differ:
            self._queue = weakref.ref(queue)
            return
        alias = callers_alias(joined)
        assert alias is not None

        def write() -> None:  # after the commit: this thread holds no transaction, nor a server connection
            try:
                fn(True)
            except Exception:
                logger.warning("queue_max: could not apply rate limits or breakers after a commit; the "
                               "next use of the store tries again", exc_info=True)  # fmt: skip
                return
            self._queue = weakref.ref(queue)

        self._pending = (weakref.ref(queue), Commit(alias, store=write))


class _Cache:
    """This process's config and queue. ``pid`` tells a forked child not to use its parent's queue."""

    def __init__(self) -> None:
        self.lock = threading.RLock()  # get_queue() holds it while get_config() builds under it too
        self.config: QueueMaxConfig | None = None
        self.queue: Queue | None = None
        self.pid = os.getpid()
        self.test_state: tuple[bool, int] | None = None  # teststore.state() when config was built
        self.queue_config: QueueMaxConfig | None = None  # the config the queue was opened with
        self.limits = Applied()  # RATE_LIMIT and QUEUE_RATE_LIMITS, as applied to the queue's store


_cache = _Cache()
_pid = os.getpid()  # this process's, kept up to date at fork rather than asked for on every get_queue()


def _forked() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)


def get_config() -> QueueMaxConfig:
    """The ``QUEUE_MAX`` setting as a ``QueueMaxConfig``: read on first use, cached until settings change.
    During a test run the LMDB store's directory is the test run's own, and the PostgreSQL store's test
    database is named for the processes a test starts (teststore.py)."""
    config, test_state = _cache.config, teststore.state()
    if config is None or _cache.test_state != test_state:
        with _cache.lock:  # one config for all threads: a second one would make get_queue() close the queue
            config, test_state = _cache.config, teststore.state()
            if config is None or _cache.test_state != test_state:
                config = build_config(*read_settings())
                moved = teststore.data_dir(config.data_dir, close=reset)
                if moved != config.data_dir:
                    config = dataclasses.replace(config, data_dir=moved)
                _cache.config, _cache.test_state = config, test_state
    alias = STORE_KINDS[config.store].callers_alias(config) if test_state[0] else None
    if alias is not None:
        teststore.publish_database(alias)  # for the workers a test starts
    return config


class NoStore(Exception):
    """The settings' LMDB ``DATA_DIR`` holds no store (a restore to another path, a volume not mounted), and
    the caller only reads (``get_queue(create=False)``): nothing was created there. The message says so."""


def get_queue(*, create: bool = True) -> Queue:
    """This process's engine ``Queue``, built from ``get_config()`` on first use and kept until the settings
    change (``reset()`` closes it). It applies ``RATE_LIMIT`` (key ``"*"``) and ``QUEUE_RATE_LIMITS`` (keys
    ``"queue:<name>"``) to the store, and removes limits on those keys that the settings no longer name. Its
    engine events are sent as the Django signals of signals.py.

    ``create=False``, for what only reads (the read-only commands, the admin, the metrics view): where the
    LMDB directory holds no store, ``NoStore`` and nothing is created (opening would make a new, empty store
    and report it healthy). The PostgreSQL store never makes its tables when it opens.

    Inside ``transaction.atomic()`` on the PostgreSQL store's ``DATABASE`` alias, the store opens on the
    caller's connection and the limits are read on it (``lent_to``): no second server connection is needed,
    which through a pool of one would wait for the caller's transaction. Limits that differ are written
    right after that transaction commits; after a rollback the next call looks again (``Applied``)."""
    queue = _cache.queue  # the common case, read without the lock: the queue of the current config
    if (
        queue is not None and _cache.queue_config is get_config() and _cache.pid == _pid
        and not queue.closed and not _cache.limits.due(queue)
    ):  # fmt: skip
        return queue
    with _cache.lock:  # reset() takes it too: a queue is never cached for a config already forgotten
        config = get_config()
        queue = _cache.queue
        if _cache.pid != os.getpid():  # a forked child: the parent's queue is not ours to use or close
            queue = _cache.queue = None
            _cache.pid = os.getpid()
        if queue is not None and _cache.queue_config is not config:  # a test run began or ended
            queue.close()
            queue = None
        if queue is None or queue.closed:
            require_installed()
            missing = None if create else STORE_KINDS[config.store].missing(config)
            if missing is not None:
                raise NoStore(missing)
            queue = _cache.queue = _open_queue(config)
            _cache.queue_config = config
        elif _cache.limits.due(queue):
            _apply_rate_limits(queue, config, caller_connection())
        return queue


def require_installed() -> None:
    """``ImproperlyConfigured`` when this process's ``INSTALLED_APPS`` lacks ``queue_max_django`` (its app
    registry ready): every job it stored would wait for ever, as no ``queue_worker`` command, task
    autodiscovery or system check exists without the app. Called before the store is first opened, so
    nothing is written."""
    if apps.apps_ready and not apps.is_installed("queue_max_django"):
        raise ImproperlyConfigured(
            "'queue_max_django' is not in INSTALLED_APPS: a job stored now would never run (without the app "
            "there is no queue_worker command, no autodiscovery of tasks.py and no system check). Add "
            "'queue_max_django' to INSTALLED_APPS; nothing was stored."
        )


def store_class(config: QueueMaxConfig) -> type[Store]:
    """The class of the store the settings name (``STORE``). Its capability attributes (``offline_compact``,
    ``transactional_enqueue``, ``multi_host``) say what the store can do; commands check them before using
    a feature that not every store has. The PostgreSQL store's module (and psycopg) is imported only here."""
    return STORE_KINDS[config.store].store_class()


def caller_connection(config: QueueMaxConfig | None = None) -> Any | None:
    """The caller's psycopg connection when a job enqueued now joins the caller's transaction: the
    PostgreSQL store lives in the ``DATABASE`` alias and this thread is inside ``transaction.atomic()`` on
    it (not in ``IMMEDIATE`` mode, where the job is claimed at once by another connection). Else None.
    ``config``: ``get_config()``, if the caller has it already."""
    config = config or get_config()
    return STORE_KINDS[config.store].caller_connection(config)


def callers_alias(joined: Any | None, config: QueueMaxConfig | None = None) -> str | None:
    """The alias whose transaction a put on ``joined`` (what ``caller_connection()`` returned) is part of:
    the store's ``DATABASE`` alias, or None when the put is a transaction of its own."""
    if joined is None:
        return None
    config = config or get_config()
    return STORE_KINDS[config.store].callers_alias(config)


def _open_queue(config: QueueMaxConfig) -> Queue:
    options: dict[str, Any] = {
        "lease_time": config.lease_time,
        "max_retries": config.max_retries,
        "retry_backoff": config.retry_backoff,
        "retry_backoff_max": config.retry_backoff_max,
        "result_ttl": config.result_ttl,
        "max_payload_bytes": config.max_payload_bytes,
        "queues": config.queues,
        "alert_threshold": config.alert_threshold,
        # a lease that expired is noticed within half a lease time (at most 15 s): short leases recover fast
        "recover_interval": min(15.0, max(0.5, config.lease_time / 2)),
        "worker_id": f"{socket.gethostname()}:{os.getpid()}",  # queue_worker's processes name themselves
    }
    queue, joined = STORE_KINDS[config.store].open(config, options, reset)
    try:
        connect(queue)  # its engine events become Django signals (signals.py)
        _apply_rate_limits(queue, config, joined)
    except BaseException:
        queue.close()
        raise
    return queue


def _apply_rate_limits(queue: Queue, config: QueueMaxConfig, joined: Any | None) -> None:
    """Make the store's limits on ``"*"`` and ``"queue:<name>"`` those of the settings (read on ``joined``,
    the caller's connection in its transaction, when not None, and written after it commits: ``Applied``)."""
    wanted = {QUEUE_KEY_PREFIX + name: rate for name, rate in config.queue_rate_limits.items()}
    if config.rate_limit is not None:
        wanted[GLOBAL_KEY] = config.rate_limit

    def apply(write: bool) -> bool:
        current = queue.rate_limits()
        changes = [(key, rate) for key, rate in wanted.items() if current.get(key) != rate]
        gone = [key for key in current if (key == GLOBAL_KEY or key.startswith(QUEUE_KEY_PREFIX))
                and key not in wanted]  # fmt: skip
        if write:
            for key, rate in changes:
                queue.set_rate_limit(key, rate)
            for key in gone:
                queue.remove_rate_limit(key)
        return bool(changes or gone)

    _cache.limits.apply(queue, joined, apply)


@contextlib.contextmanager
def store_connection(alias: str) -> Iterator[Any]:
    """A connection to the store's database when the store the settings name has tables (PostgreSQL) and
    lives in (or, with ``URL``, is made with) the database of ``alias``: what the migration that makes the
    tables runs on; None otherwise (the LMDB store, another alias, or settings that name no store: the
    checks report those), the settings read no further."""
    raw, _base_dir = read_settings()
    name = raw.get("STORE", DEFAULTS["STORE"]) if isinstance(raw, Mapping) else None
    kind = STORE_KINDS.get(name) if isinstance(name, str) else None
    if kind is None or kind.connection is None:
        yield None
        return
    with kind.connection(get_config(), alias) as conn:  # ImproperlyConfigured, naming the check ids
        yield conn


def upgrade_after_migrate(sender: Any, *, using: str = DEFAULT_DB_ALIAS, **kwargs: Any) -> None:
    """``post_migrate`` of this app (apps.py): the store kind's ``after_migrate`` on its connection in
    ``using``'s database (the PostgreSQL store's schema made current: storekinds/postgresql/tables.py)."""
    with store_connection(using) as conn:
        if conn is None:
            return  # the LMDB store, or another alias: no query at all
        after = STORE_KINDS[get_config().store].after_migrate
        if after is not None:
            after(conn, using)


def reset() -> None:
    """Forget the cached config and close this process's queue: the next call reads the settings again."""
    with _cache.lock:
        queue = _cache.queue if _cache.pid == os.getpid() else None
        _cache.config = _cache.queue = None
    if queue is not None:
        queue.close()


@receiver(setting_changed)
def _on_setting_changed(sender: Any, *, setting: str, **kwargs: Any) -> None:
    if setting in ("QUEUE_MAX", "BASE_DIR", "DATABASES", "INSTALLED_APPS"):
        reset()
