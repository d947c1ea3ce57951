"""``@task(unique_key=..., unique_until=..., on_duplicate=...)``: a task's unique-key options, checked when
the task is made (or ``.using()`` copies it), and turned into the engine's put options for each call
(``engine/uniqueness.py`` makes the key of a call; the store decides, in the put's transaction)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from ..conf import callers_alias, lent_to
from ..encryption.jobs import seal_put
from ..engine import Queue
from ..engine.uniqueness import SKIP, STARTED, check_key_option, check_options, key_of
from ..observability import tracing
from ..signals import in_callers_transaction

KeyOption = str | bool | Callable[..., str] | None


@dataclass(frozen=True, slots=True)
class UniqueOptions:
    """A task's ``unique_key`` (a str, True, or a function of the call's arguments), ``unique_until``
    (``"started"``, ``"finished"`` or seconds) and ``on_duplicate`` (``"skip"``, ``"replace"``,
    ``"raise"``)."""

    key: str | bool | Callable[..., str]
    until: str | float = STARTED
    on_duplicate: str = SKIP

    @classmethod
    def make(cls, key: KeyOption, until: Any, on_duplicate: Any) -> UniqueOptions | None:
        """The options as ``@task`` takes them (``InvalidJob``, a ``ValueError``, when one is bad): None
        without a key (``unique_until``/``on_duplicate`` are then checked, and unused)."""
        check_key_option(key)
        check_options(until, on_duplicate)
        if key is None or key is False:
            return None
        return cls(key, until, on_duplicate)

    @staticmethod
    def using(
        current: UniqueOptions | None, key: KeyOption, until: Any, on_duplicate: Any
    ) -> UniqueOptions | None:
        """``.using()``'s: each option given replaces the task's (``unique_key=False`` drops the key)."""
        if key is False:
            return None
        if current is None:
            if key is None:
                if until is not None or on_duplicate is not None:
                    raise ValueError("unique_until and on_duplicate need a unique_key (on the task or here)")
                return None
            return UniqueOptions.make(key, STARTED if until is None else until, on_duplicate or SKIP)
        changed = replace(
            current,
            key=current.key if key is None else key,
            until=current.until if until is None else until,
            on_duplicate=current.on_duplicate if on_duplicate is None else on_duplicate,
        )
        return UniqueOptions.make(changed.key, changed.until, changed.on_duplicate)

    def key_of(
        self, name: str, signature: inspect.Signature, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> str:
        """The key of one call (``InvalidJob`` when the key function fails or returns no valid key)."""
        return key_of(self.key, name, signature, args, kwargs)

    def put_options(self, key: str) -> dict[str, Any]:
        """The engine's options of a put with ``key`` (``Queue.put_unique``)."""
        return {"unique_key": key, "unique_until": self.until, "on_duplicate": self.on_duplicate}


Call = tuple[Sequence[Any], Mapping[str, Any]]


class KeyedTask(Protocol):
    """What these functions read of a ``tasks.Task``."""

    name: str
    queue: str
    unique: UniqueOptions | None
    _signature: inspect.Signature


def keys_of(task: KeyedTask, calls: Sequence[Call]) -> list[str] | None:
    """The unique key of each call of ``task`` (None: the task has none), all made before anything is
    stored: ``InvalidJob`` names the first that fails."""
    unique = task.unique
    if unique is None:
        return None
    return [unique.key_of(task.name, task._signature, args, kwargs) for args, kwargs in calls]


def store_one(
    task: KeyedTask,
    queue: Queue,
    payload: Any,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    connection: Any,
    options: dict[str, Any],
) -> tuple[int, bool]:
    """Put one job of ``task`` (with its unique key, if it has one). -> (its id, or the id of the job that
    holds the key; whether it was a duplicate). ``DuplicateJob`` with ``on_duplicate="raise"``."""
    payload, options = seal_put(task, payload, options)  # an encrypted task's: sealed (encryption/jobs.py)
    unique = task.unique
    if unique is None:
        return queue.put(payload, connection=connection, **options), False
    key = unique.key_of(task.name, task._signature, args, kwargs)
    done = queue.put_unique(payload, connection=connection, **options, **unique.put_options(key))
    return done.job_id, done.deduplicated


def store_many(
    task: KeyedTask,
    queue: Queue,
    payloads: list[dict[str, Any]],
    keys: list[str],
    joined: Any,
    options: dict[str, Any],
) -> list[tuple[int, bool]]:
    """``.map()``'s puts with one unique key per item: each on its key's shard (one transaction per shard),
    or all in the caller's transaction on ``joined``. Of several items with one key, the first is stored
    and the next are its duplicates. -> (id, deduplicated) per item."""
    unique = task.unique
    assert unique is not None
    settings: dict[str, Any] = {"unique_until": unique.until, "on_duplicate": unique.on_duplicate}
    with tracing.sending(task.name, task.queue, options) as sending:
        with in_callers_transaction(callers_alias(joined)), lent_to(queue, joined):
            done = queue.put_many_unique(payloads, unique_keys=keys, connection=joined, **options, **settings)
        sending.sent_many([put.job_id for put in done])
    return [(put.job_id, put.deduplicated) for put in done]
