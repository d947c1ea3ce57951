"""``queue_enqueue``'s ``django.tasks`` side: a task of Django's Tasks framework (Django >= 6.0) whose backend
is ``QueueMaxBackend``, found by its module path among the tasks this process registered (as a worker finds
it: ``worker/banner.django_task_names``, the backend's ``OPTIONS["MODULES"]`` imported), checked against its
arguments and options, and enqueued as ``Task.enqueue()`` does."""

from __future__ import annotations

import datetime as dt
import importlib.util
import inspect
import math
from dataclasses import dataclass
from typing import Any

import django
from django.utils import timezone

from ..worker.banner import django_task_names


def missing() -> str | None:
    """Why no ``django.tasks`` task can be enqueued here (this Django has no Tasks framework), or None."""
    if importlib.util.find_spec("django.tasks") is not None:
        return None
    return (
        f"Tasks of Django's own Tasks framework (django.tasks.task) need Django 6.0 or later: this is Django "
        f"{django.get_version()}, so queue_enqueue takes the app's @task tasks only."
    )


def find(name: str) -> Any | None:
    """The ``django.tasks`` Task with module path ``name`` that ``QueueMaxBackend`` validated in this process
    (after importing each such backend's ``MODULES``); None when there is none, or no ``django.tasks``."""
    if missing() is not None or django_task_names(quiet=True) is None:
        return None
    from .. import backend

    return backend.registered.get(name)


@dataclass(frozen=True)
class DjangoCall:
    """One job of a ``django.tasks`` task: its ``using()`` variant with this job's options, and arguments."""

    task: Any  # django.tasks.Task
    args: list[Any]
    kwargs: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.task.module_path)

    @property
    def queue(self) -> str:
        return str(self.task.queue_name)

    def enqueue(self) -> int:
        """Enqueue it through its backend (``Task.enqueue``): -> the job id."""
        return int(self.task.enqueue(*self.args, **self.kwargs).id)


def call(
    task: Any, args: list[Any], kwargs: dict[str, Any], *, priority: Any, queue: Any, delay: Any
) -> DjangoCall:
    """A ``DjangoCall`` if ``task`` takes these arguments and options (``delay``: seconds from now, as its
    ``run_after``); a ``ValueError`` saying what is wrong otherwise (Django's ``InvalidTask`` included)."""
    from django.tasks.exceptions import InvalidTask

    signature = inspect.signature(task.func)
    try:
        signature.bind(*([None] if task.takes_context else []), *args, **kwargs)
    except TypeError as exc:
        raise ValueError(f"task {task.module_path!r} cannot be called with these arguments: {exc}") from None
    if delay is not None and (
        isinstance(delay, bool) or not isinstance(delay, (int, float)) or not 0 <= delay < math.inf
    ):
        raise ValueError(f"delay must be a number of seconds >= 0, not {delay!r}")
    try:
        run_after = None if delay is None else timezone.now() + dt.timedelta(seconds=delay)
        variant = task.using(priority=priority, queue_name=queue, run_after=run_after)
    except (InvalidTask, OverflowError, ValueError, TypeError) as exc:
        raise ValueError(f"task {task.module_path!r}: {exc}") from None
    return DjangoCall(variant, args, kwargs)
