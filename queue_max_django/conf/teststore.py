"""A store of its own for a test run, as Django gives the tests a database of their own.

While Django's test environment is set up (``django.test.utils.setup_test_environment()``, which
``manage.py test`` and pytest-django call before the tests run, and ``teardown_test_environment()`` undoes),
the LMDB store's directory that the settings name (``DATA_DIR``, or ``BASE_DIR / "queue_max_data"``: the
development store) is never opened. A temporary directory of this test run takes its place: made on first
use, removed when the process exits. A test that points ``DATA_DIR`` at another directory
(``override_settings``, pytest-django's ``settings``) gets that directory.

Processes that a test starts (a ``queue_worker``, a ``manage.py`` command) are not in a test environment;
they find the test run's directory in the environment variable ``ENV_DIR`` (set when the directory is made)
and use it in place of the same settings directory. Every process of Django's parallel test runner sets up a
test environment and so has a directory of its own, as it has a database of its own.

``QUEUE_MAX_TEST_STORE=off`` in the environment turns this off: tests then use the store the settings name.
The PostgreSQL store in a ``DATABASES`` alias needs no directory: Django's test database is the store's
(``migrate``, which Django runs to make it, makes the store's tables there). Its connections are the
store's own, though, and PostgreSQL refuses to drop a database that a session uses: ``close_before_drop``
makes Django's ``destroy_test_db`` of that alias close the store first.

Django renames that database (``NAME`` becomes ``test_...``) in the test process only: a process that a test
starts reads the settings module again and would reach the development database. So the test process
names its test database in the environment variable ``ENV_DATABASE`` (``publish_database``, on every
``conf.get_config()`` in a test run), and a process started from it takes that name for the alias as it
starts (``adopt_test_database``, from ``AppConfig.ready()``), before anything connects: the store, its
system checks and the tasks' own queries then all reach the test database, as in the test process.
"""

from __future__ import annotations

import atexit
import functools
import json
import multiprocessing
import multiprocessing.util
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import Settings, UserSettingsHolder, settings
from django.core.exceptions import ImproperlyConfigured
from django.db.backends.base.creation import TEST_DATABASE_PREFIX

from .defaults import resolve_data_dir

ENV_SWITCH = "QUEUE_MAX_TEST_STORE"
"""``off``: tests use the store the settings name; ``on`` (or unset): a temporary one for the test run."""
ENV_DIR = "QUEUE_MAX_TEST_DATA_DIR"
"""Set by the process that made a test run's directory, for the processes it starts: JSON
``{"for": <the settings directory>, "dir": <the test run's directory>}``."""
ENV_DATABASE = "QUEUE_MAX_TEST_DATABASE"
"""Set by a test run's process whose PostgreSQL store is in a ``DATABASES`` alias, for the processes it
starts: JSON ``{"alias": <the alias>, "name": <the NAME of its test database>}``."""
PREFIX = "queue_max_test_"

_lock = threading.Lock()
_made: dict[int, Path] = {}  # pid -> the directory that process made (a forked child makes its own)
_closers: dict[str, Callable[[], None]] = {}  # alias -> what closes the store in its test database
_published: tuple[str, str, str] | None = None  # (alias, name, its ENV_DATABASE value) last published
_used: Path | None = None  # the test run's directory this process used last (a forked child inherits it)
_pid = os.getpid()  # kept up to date at fork rather than asked for on every get_config()


def _forked() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)


def state() -> tuple[bool, int]:
    """What decides the store directory and may change under a cached config, cheap enough to read on every
    ``conf.get_config()``: whether a test environment is set up, and this process (a forked child makes a
    directory of its own). The config is built again when it changes. (The environment variables are read
    then: they are set before a test run starts, or inherited by a process it starts.)"""
    return _in_test_environment(), _pid


def data_dir(configured: Path | None, *, close: Callable[[], None]) -> Path | None:
    """The directory the LMDB store opens, ``configured`` being what the current settings say (None: the
    PostgreSQL store, which is left as it is): the test run's directory in place of the settings one.
    ``close`` closes the store; it is called before a test run's directory is removed."""
    in_test_run, inherited = _in_test_environment(), _inherited()
    if configured is None or not (in_test_run or inherited) or not _enabled():
        return configured  # (outside tests, the switch is not even read)
    home = _settings_dir()
    if home is None or not _same(configured, home):
        return configured  # a directory of the test's own choosing
    if in_test_run:
        return _own_dir(home, close)
    if inherited is not None and _same(Path(inherited.get("for", "")), home):
        return Path(inherited["dir"])
    return configured


def publish_database(alias: str) -> None:
    """In a test run: name the database that the store's ``alias`` names now (Django's test database, which
    its test runner put in ``DATABASES``) in ``ENV_DATABASE``, for the processes this one starts."""
    global _published
    entry = settings.DATABASES.get(alias)
    name = entry.get("NAME") if isinstance(entry, dict) else None
    if not isinstance(name, str) or not name:
        return
    if _published is None or _published[:2] != (alias, name) or os.environ.get(ENV_DATABASE) != _published[2]:
        _published = (alias, name, json.dumps({"alias": alias, "name": name}))
        os.environ[ENV_DATABASE] = _published[2]


def adopt_test_database() -> None:
    """In a process that a test run started (one not in a test environment itself, with ``ENV_DATABASE``
    inherited): point the alias it names at the test run's database, as Django's test runner did in the
    test run's process. Only when that name is the alias's test database as this process's settings make
    it (``TEST["NAME"]``, or ``test_`` + ``NAME``; a parallel or xdist process's copy adds ``_<suffix>``);
    a name of other settings is left alone. Called when Django starts (``AppConfig.ready()``), before the
    store, a system check or a task connects."""
    text = os.environ.get(ENV_DATABASE)
    if not text or _in_test_environment():
        return
    try:
        found = json.loads(text)
    except ValueError:
        return
    if not isinstance(found, dict):
        return
    alias, name = found.get("alias"), found.get("name")
    if not isinstance(alias, str) or not isinstance(name, str):
        return
    entry: Any = settings.DATABASES.get(alias)
    if not isinstance(entry, dict) or entry.get("NAME") in (None, "", name):
        return
    test_settings: Any = entry.get("TEST") or {}
    test = test_settings.get("NAME") or TEST_DATABASE_PREFIX + str(entry["NAME"])
    if name != test and not name.startswith(test + "_"):
        return
    from django.db import connections

    connections[alias].close()  # (none is open yet when Django starts)
    entry["NAME"] = name
    connections[alias].settings_dict["NAME"] = name


def close_before_drop(alias: str, close: Callable[[], None]) -> None:
    """During a test run, make Django close the store (``close``) before it drops the test database of
    ``alias``, the store's. Django has no signal there: its backend's ``destroy_test_db`` is wrapped, once
    per process, for the store's alias only (at the class: each thread has its own connection objects)."""
    if not _in_test_environment():
        return
    from django.db import connections

    _closers[alias] = close
    creation = type(connections[alias].creation)
    original = creation.destroy_test_db
    if getattr(original, "_queue_max_closes_first", False):
        return

    @functools.wraps(original)
    def destroy_test_db(self: Any, *args: Any, **kwargs: Any) -> Any:
        closer = _closers.get(self.connection.alias)
        if closer is not None:
            closer()  # PostgreSQL: "database ... is being accessed by other users" otherwise
        return original(self, *args, **kwargs)

    destroy_test_db._queue_max_closes_first = True  # type: ignore[attr-defined]
    creation.destroy_test_db = destroy_test_db  # type: ignore[method-assign]


def _enabled() -> bool:
    value = os.environ.get(ENV_SWITCH, "on").strip().lower()
    if value not in ("on", "off"):
        raise ImproperlyConfigured(
            f"the environment variable {ENV_SWITCH} is {os.environ[ENV_SWITCH]!r}: say 'off' for tests to "
            f"use the store the settings name, or 'on' (the default) for a temporary store per test run"
        )
    return value == "on"


def _in_test_environment() -> bool:
    utils = sys.modules.get("django.test.utils")  # setup_test_environment() lives there: imported if called
    return utils is not None and hasattr(utils._TestState, "saved_data")


def _settings_dir() -> Path | None:
    """The store directory of the settings as loaded, under every ``override_settings`` of the tests."""
    wrapped: Any = vars(settings)["_wrapped"]  # (LazySettings keeps it there; django-stubs hides it)
    while isinstance(wrapped, UserSettingsHolder) and isinstance(
        wrapped.default_settings, (UserSettingsHolder, Settings)
    ):
        wrapped = wrapped.default_settings  # (settings.configure()'s holder sits on Django's defaults)
    raw = getattr(wrapped, "QUEUE_MAX", {})
    value = raw.get("DATA_DIR") if isinstance(raw, dict) else None
    return resolve_data_dir(value, getattr(wrapped, "BASE_DIR", None))


def _same(one: Path, other: Path) -> bool:
    """Whether two paths name one directory: the same path once every symlink in it is followed (a folder
    not made yet counts by the path it would have), or, for two that exist, the same file on disk (device
    and inode: a bind mount). A path that reaches the development store by another name is that store."""
    if os.path.realpath(one) == os.path.realpath(other):
        return True
    try:
        return os.path.samefile(one, other)
    except OSError:  # one of them does not exist (yet): the paths said it
        return False


def _inherited() -> dict[str, str] | None:
    text = os.environ.get(ENV_DIR)
    try:
        found = json.loads(text) if text else None
    except ValueError:
        return None
    return found if isinstance(found, dict) and isinstance(found.get("dir"), str) else None


def share_parent_dir() -> None:
    """In a worker process forked (by the fork server) from a ``queue_worker`` in a test run: use the test
    run's directory that the worker's supervisor uses, rather than one of its own as any other forked
    process does (which would leave the test's jobs unrun), and leave removing it to the supervisor's
    process. Nothing happens outside a test run."""
    if _used is not None:
        _made[os.getpid()] = _used  # (the fork server is forked from a process with no other thread)


def _own_dir(home: Path, close: Callable[[], None]) -> Path:
    """This process's test run directory, made on first use and removed when the process exits."""
    global _used
    pid = os.getpid()
    with _lock:
        made = _made.get(pid)
        if made is None:
            made = _made[pid] = Path(tempfile.mkdtemp(prefix=PREFIX))
            os.environ[ENV_DIR] = json.dumps({"for": os.path.abspath(home), "dir": str(made)})
            if multiprocessing.parent_process() is None:
                atexit.register(_remove, made, close)
            else:  # a process of a multiprocessing pool (the parallel test runner) ends without atexit
                multiprocessing.util.Finalize(None, _remove, args=(made, close), exitpriority=0)
        _used = made
        return made


def _remove(path: Path, close: Callable[[], None]) -> None:
    close()  # the store, before its files go
    shutil.rmtree(path, ignore_errors=True)
