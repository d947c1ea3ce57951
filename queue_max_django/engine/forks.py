"""Which fork of the process this is, and whether a store is open in it.

Handles (LMDB environments, descriptors watched by inotify, the wake file's writer, PostgreSQL connections)
belong to the process that opened them. Code that keeps such handles compares the generation it saw when it
opened them with the current one, instead of calling ``os.getpid()`` (a system call) on every operation.

A process with a store open must never be forked to run a worker: its LMDB handles or its
psycopg connections would be shared with the child. Each store module registers a probe that lists what of
it this process holds (``add_open_probe``); ``open_stores()`` asks them all, and ``refuse_fork_with_store``
raises ``StoreOpenAtFork`` when any answers. A store module that was never imported opened nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from .errors import QueueError

_generation = [0]
_probes: list[Callable[[], list[str]]] = []


class StoreOpenAtFork(QueueError):
    """A process was about to be forked to run workers while it holds a store's handles."""


def _forked() -> None:
    _generation[0] += 1


os.register_at_fork(after_in_child=_forked)


def fork_generation() -> int:
    """0 in a process that was not forked from one that imported this module; +1 in each forked child."""
    return _generation[0]


def add_open_probe(probe: Callable[[], list[str]]) -> None:
    """Register ``probe``: a callable listing what of one kind of store this process holds open (its own
    handles, and any it inherited from a parent across ``fork``), one description each."""
    _probes.append(probe)


def open_stores() -> list[str]:
    """What this process holds open of any store: an LMDB environment's path, a PostgreSQL connection."""
    return [held for probe in _probes for held in probe()]


def refuse_fork_with_store(what: str) -> None:
    """``StoreOpenAtFork`` if this process holds any store open: it must not be forked to do ``what``."""
    held = open_stores()
    if held:
        raise StoreOpenAtFork(f"not forking {what}: this process has a store open ({', '.join(held)})")
