"""queue_max_django: a persistent, crash-safe job queue for Django on one machine.

Importing this package imports nothing else, Django included: the engine (``queue_max_django.engine``) runs
without Django. The Django layer's names (``task``, ``retryable_task``, ``periodic_task``) are loaded on
first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .periodic import periodic_task
    from .tasks import retryable_task, task

__all__ = ["periodic_task", "retryable_task", "task"]

_LAZY = {"task": "tasks", "retryable_task": "tasks", "periodic_task": "periodic"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
