"""This process's tasks by name: the registry that ``@task`` fills and the runner and the checks read.

A leaf of the Django layer (it imports nothing of it), so that runner.py and conf/checks.py can look tasks up
without importing tasks.py, which imports them. They see a task through ``RegisteredTask``, the part of
``tasks.Task`` they read; ``tasks.registry`` is this same object, typed with the ``Task`` objects it holds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["RegisteredTask", "Registry", "registry"]


class RegisteredTask(Protocol):
    """What the registry, the runner and the checks read of a task (``tasks.Task`` has it all)."""

    @property
    def name(self) -> str:
        """The name jobs of this task are stored under."""

    @property
    def path(self) -> str:
        """``module.qualname`` of the function: two paths under one name are a conflict."""

    @property
    def func(self) -> Callable[..., Any]:
        """The decorated function."""

    @property
    def retry_on(self) -> tuple[type[BaseException], ...]:
        """Exceptions that are always retried."""

    @property
    def permanent_on(self) -> tuple[type[BaseException], ...]:
        """Exceptions that are never retried."""

    @property
    def retry_backoff(self) -> float | None:
        """The task's own backoff base in seconds; None: the queue's."""


T = TypeVar("T", bound=RegisteredTask)


class Registry(Generic[T]):
    """This process's tasks by name. A second, different function under a taken name is refused (the first
    keeps the name) and listed in ``conflicts()``; re-registering the same module.qualname (a reload)
    replaces it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tasks: dict[str, T] = {}
        self._conflicts: list[tuple[str, str, str]] = []

    def register(self, task: T) -> None:
        with self._lock:
            existing = self._tasks.get(task.name)
            if existing is not None and existing.path != task.path:
                self._conflicts.append((task.name, existing.path, task.path))
                return
            self._tasks[task.name] = task

    def unregister(self, name: str) -> None:
        with self._lock:
            self._tasks.pop(name, None)

    def get(self, name: str) -> T | None:
        return self._tasks.get(name)

    def __getitem__(self, name: str) -> T:
        return self._tasks[name]

    def __contains__(self, name: object) -> bool:
        return name in self._tasks

    def names(self) -> list[str]:
        return sorted(self._tasks)

    def conflicts(self) -> list[tuple[str, str, str]]:
        """(name, the registered function's path, the refused one's path) for each name claimed twice."""
        return list(self._conflicts)


registry: Registry[RegisteredTask] = Registry()
