"""Jobs enqueued inside a database transaction, and what their handles know of its commit.

Inside ``transaction.atomic()`` a job is either written in the caller's transaction (the PostgreSQL store
in that very database: ``conf.caller_connection()``) or stored when the transaction commits
(``ENQUEUE_ON_COMMIT``, on by default: the LMDB store, or PostgreSQL in another database). Either way no
other connection sees the job before the commit, and none ever after a rollback: the same code means the
same on both stores. A ``Commit`` follows that transaction for the jobs' handles: open ("not committed
yet"), committed, or rolled back. It is a ``transaction.on_commit()`` callback; Django has no rollback
hook, so a rollback is seen as the callback gone from its connection's list while it never ran.

``flush()`` stores now the jobs that wait for the commit of this thread's transaction, as if it had
committed: ``testing.run_queued()`` inside a ``TestCase``, whose transaction never commits, runs them.
"""

from __future__ import annotations

import collections
import itertools
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, transaction

OPEN, COMMITTED, ROLLED_BACK, FAILED = "open", "committed", "rolled back", "failed"

_written: weakref.WeakValueDictionary[int | str, Commit] = weakref.WeakValueDictionary()
_recent: collections.deque[Commit] = collections.deque(maxlen=1000)  # what find() knows after a rollback
_placeholders = itertools.count(1)


class Commit:
    """The commit of the transaction a job was enqueued in (on ``alias``, in this thread). ``store``: what
    stores the job at the commit (None: the job is written in the transaction itself)."""

    def __init__(self, alias: str = DEFAULT_DB_ALIAS, store: Callable[[], None] | None = None) -> None:
        self.alias = alias
        # this thread's connection (a handle may be looked at from another thread); weak: gone with its thread
        self._wrapper = weakref.ref(connections[alias])
        self._store = store
        self.deferred = store is not None  # stored at the commit, rather than written in the transaction
        self._ran = False
        self.error: BaseException | None = None  # what the store at the commit raised
        transaction.on_commit(self._committed, using=alias)

    def _committed(self) -> None:
        if self._ran:
            return
        self._ran = True
        store, self._store = self._store, None
        if store is None:
            return
        try:
            store()
        except BaseException as exc:
            self.error = exc
            raise

    @property
    def state(self) -> str:
        """``OPEN`` (not committed yet), ``COMMITTED``, ``ROLLED_BACK``, or ``FAILED`` (committed, but
        storing the job then raised ``error``)."""
        if self._ran:
            return FAILED if self.error is not None else COMMITTED
        wrapper = self._wrapper()
        if wrapper is None or not wrapper.in_atomic_block:
            return ROLLED_BACK
        waiting = any(entry[1] == self._committed for entry in wrapper.run_on_commit)
        return OPEN if waiting else ROLLED_BACK  # gone: the savepoint it was registered in rolled back

    @property
    def committed(self) -> bool:
        return self.state == COMMITTED

    def note(self) -> str:
        """A few words for a handle's ``repr``: "not committed yet", ... ("" once committed)."""
        return {OPEN: "not committed yet", ROLLED_BACK: "rolled back: never stored"}.get(
            self.state, "" if self.error is None else "storing it at the commit failed"
        )

    def explain(self, what: str) -> str:
        """Why ``what`` (``"job 7"``) cannot be read from the store now."""
        state = self.state
        if state == OPEN:
            how = "is stored when" if self.deferred else "was written in"
            return (
                f"{what} is not committed yet: it {how} the open transaction of database {self.alias!r} "
                f"(transaction.atomic()), which no other connection sees until it commits, and nothing is "
                f"stored if it rolls back"
            )
        if state == ROLLED_BACK:
            return (
                f"{what} was never stored: the transaction it was enqueued in (database {self.alias!r}) "
                f"rolled back"
            )
        if state == FAILED:
            return f"{what} was to be stored when its transaction committed, which failed: {self.error!r}"
        return f"{what} was committed"

    def watch(self, keys: Iterable[int | str]) -> None:
        """Remember that the jobs ``keys`` (ids, or a placeholder id) are this transaction's (``find``)."""
        for key in keys:
            _written[key] = self
        _recent.append(self)


def written(alias: str | None, ids: Iterable[int]) -> Commit | None:
    """The ``Commit`` of jobs ``ids`` just written in this thread's transaction on ``alias`` (None: they
    were written in a transaction of their own, committed already)."""
    if alias is None:
        return None
    commit = Commit(alias)
    commit.watch(ids)
    return commit


def find(key: int | str) -> Commit | None:
    """The transaction, not committed (open, rolled back or failed), that job ``key`` was enqueued in by
    this process, if any."""
    commit = _written.get(key)
    return None if commit is None or commit.committed else commit


def placeholder(commit: Commit) -> str:
    """An id for a ``django.tasks`` result whose job is stored at the commit (it has none before): one that
    says so, and that ``find`` knows until the commit gives the real one."""
    key = f"not-committed-yet-{next(_placeholders)}"
    commit.watch([key])
    return key


def waits_for_commit(enabled: bool | None, default: bool) -> bool:
    """Is a job enqueued now to wait for the commit of this thread's transaction on the default database?
    ``enabled``: the task's or backend's own choice (None: ``default``, ``ENQUEUE_ON_COMMIT``)."""
    wanted = default if enabled is None else enabled
    return wanted and transaction.get_connection().in_atomic_block


def flush(alias: str = DEFAULT_DB_ALIAS) -> int:
    """Store now the jobs that wait for the commit of this thread's open transaction on ``alias`` (as if it
    had committed; their handles get their ids). -> how many enqueues ran."""
    wrapper = connections[alias]
    if not wrapper.in_atomic_block:
        return 0
    ran = 0
    for entry in list(wrapper.run_on_commit):
        owner: Any = getattr(entry[1], "__self__", None)
        if isinstance(owner, Commit) and owner._store is not None and not owner._ran:
            owner._committed()
            ran += 1
    return ran
