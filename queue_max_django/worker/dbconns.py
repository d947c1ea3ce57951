"""Django's database connections around a worker thread's jobs: ``close_old()`` is Django's
``close_old_connections()``, as Django runs it when a request starts and ends (a connection past
``CONN_MAX_AGE``, or one a task left broken or out of autocommit, is closed, so the next job gets a fresh
one), but only in a thread that has opened a database connection: until then it has none to close.

Django's connections are per thread, and each one it opens sends ``connection_created`` from the thread
that opens it: this module marks that thread. A worker thread whose tasks never touch the database (the
common no-op or cache-only task) then skips the call, which walks Django's per-thread connection handler
twice a job for nothing.
"""

from __future__ import annotations

import threading
from typing import Any

from django.db import close_old_connections
from django.db.backends.signals import connection_created


class _Thread(threading.local):
    opened = False  # this thread has opened a database connection (a class default: no lookup fails)


_thread = _Thread()


def _opened(sender: Any, connection: Any, **kwargs: Any) -> None:
    _thread.opened = True


connection_created.connect(_opened, weak=False, dispatch_uid="queue_max_django.worker.dbconns")


def opened() -> bool:
    """Has the calling thread opened a database connection (since it began)?"""
    return _thread.opened


def close_old() -> None:
    """``close_old_connections()`` if the calling thread has opened a database connection."""
    if _thread.opened:
        close_old_connections()
