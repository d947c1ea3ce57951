"""Concurrency limits: at most N jobs with a given limit key run at once, in every process and on every
machine of a store. Pure: the checks of a put's ``concurrency`` option, and the names every store derives
from it; the counting is the store's, in the claim's own transaction (``stores/contract/concurrency.py``).

A job's limits are a tuple of ``(key, n)`` pairs, fixed at its put and stored with it: at most ``n`` jobs
carrying ``key`` run at once. The Django layer makes the keys: ``"queue:<queue>"`` (``QUEUE_CONCURRENCY``),
``"task:<task name>"`` (``@task(concurrency=N)``) and ``"task:<task name>:<key value>"`` (with
``concurrency_key``). The broadest key comes first: a store that must keep every job of a key in one place
(the LMDB store: one shard) routes the job by it. A limited job with a unique key is routed by its limits,
its key scoped to that route (``uniqueness.scoped``).

Waiting limited jobs are grouped by their queue and their last (most specific) key: the claim gives the
groups turns, least recently served first (``group_of``), so that one key's many waiting jobs never starve
another key's few.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterable, Mapping
from typing import Any

from .errors import InvalidJob
from .jobspec import JobSpec, variant
from .validate import bad_character

Limits = tuple[tuple[str, int], ...]

MAX_KEY = 200  # characters of a limit key
MAX_LIMITS = 3  # limits one job may carry (a queue's, a task's or a key's, and one more)
MAX_N = 1_000_000  # the largest limit: more would be no limit
GROUP_SEP = "\x1f"  # between a group's queue and its key: no queue name or key holds a control character
SCAN_GROUPS = 64  # groups a claim looks at, at most, before it gives up for this call
SCAN_PAST = 64  # waiting jobs of paused tasks a claim passes over in one group, at most (``Skip``)

# Paused tasks a limited claim passes over: queue -> the task names whose jobs wait there (pauses.py)
Skip = Mapping[str, frozenset[str]]


def check_limits(value: Any) -> Limits | None:
    """A put's ``concurrency`` option: None, or a sequence of ``(key, n)`` pairs: each key a non-empty str
    of at most ``MAX_KEY`` characters with no control character, each ``n`` an int from 1 to ``MAX_N``, the
    keys distinct, at most ``MAX_LIMITS`` of them. -> the pairs as a tuple of tuples; ``InvalidJob``
    otherwise (before anything is written)."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise InvalidJob(f"concurrency must be a sequence of (key, n) pairs, not {value!r}")
    pairs = []
    for item in value:
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise InvalidJob(f"concurrency must be a sequence of (key, n) pairs; {item!r} is not one")
        key, n = item
        if not isinstance(key, str) or not key or len(key) > MAX_KEY:
            raise InvalidJob(f"a concurrency key must be a non-empty str of at most {MAX_KEY} characters, "
                             f"not {key!r}")  # fmt: skip
        why = bad_character(key)
        if why is not None:
            raise InvalidJob(f"a concurrency key cannot contain control characters: {key!r} has {why}")
        if type(n) is not int or not 1 <= n <= MAX_N:
            raise InvalidJob(f"a concurrency limit must be an int from 1 to {MAX_N}, not {n!r} (key {key!r})")
        pairs.append((key, n))
    if not pairs or len(pairs) > MAX_LIMITS:
        raise InvalidJob(f"concurrency takes 1 to {MAX_LIMITS} (key, n) pairs, not {len(pairs)}")
    if len({key for key, _n in pairs}) != len(pairs):
        raise InvalidJob(f"concurrency names a key twice: {value!r}")
    return tuple(pairs)


def group_of(queue: str, limits: Limits) -> str:
    """The group a waiting job takes turns in: its queue and its most specific (last) key."""
    return queue + GROUP_SEP + limits[-1][0]


def queue_of(group: str) -> str:
    """The queue of a ``group_of`` group."""
    return group.partition(GROUP_SEP)[0]


def key_of(group: str) -> str:
    """The limit key of a ``group_of`` group."""
    return group.partition(GROUP_SEP)[2]


def route_key(limits: Limits) -> str:
    """The key that places the job, where a store keeps every job of a key together: the broadest."""
    return limits[0][0]


def full_key(limits: Limits, running: Mapping[str, int]) -> str | None:
    """The first of ``limits`` whose ``n`` jobs already run (``running``: jobs running per key), or None:
    one more may start."""
    for key, n in limits:
        if running.get(key, 0) >= n:
            return key
    return None


def round_of(groups: Iterable[str], queues: tuple[str, ...] | None) -> collections.deque[str]:
    """The groups one limited claim goes round, from the store's turns (``groups``, in turn order): those
    of ``queues`` (None: every queue), at most ``SCAN_GROUPS``. A group served goes to its end again."""
    return collections.deque(itertools.islice((g for g in groups if served(g, queues)), SCAN_GROUPS))


def passing(group: str, skip: Skip | None) -> frozenset[str] | None:
    """The task names a limited claim passes over in ``group`` (its queue's paused tasks), or None."""
    if not skip:
        return None
    return skip.get(queue_of(group)) or None


def served(group: str, queues: tuple[str, ...] | None) -> bool:
    """Is ``group`` one of the queues a claim serves (None: every queue)?"""
    return queues is None or queue_of(group) in queues


def limited(spec: JobSpec, concurrency: Any, partition_key: Any) -> tuple[JobSpec, str]:
    """``spec`` for jobs under the limits ``concurrency`` (checked by ``check_limits``), and the key that
    routes them (``route_key``): ``InvalidJob`` with a ``partition_key``, which would route them elsewhere.
    The spec is a copy: the Queue's cached one stays as it is."""
    limits = check_limits(concurrency)
    assert limits is not None
    if partition_key is not None:
        raise InvalidJob("give concurrency or partition_key, not both: a limit's jobs are placed by its key")
    return variant(spec, concurrency=limits), route_key(limits)


def summary(running: Mapping[str, int], waiting: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """Per limit key in use, sorted: ``{"running": jobs running with it, "waiting": limited jobs waiting
    whose most specific key it is}`` (``waiting``: per group, ``group_of``)."""
    out: dict[str, dict[str, int]] = {key: {"running": count, "waiting": 0} for key, count in running.items()}
    for group, count in waiting.items():
        out.setdefault(key_of(group), {"running": 0, "waiting": 0})["waiting"] += count
    return dict(sorted(out.items()))
