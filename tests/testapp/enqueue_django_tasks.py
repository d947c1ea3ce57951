"""``django.tasks`` tasks for test_commands_enqueue_django.py (Django >= 6.0): imported first by the command,
from the backend's ``OPTIONS["MODULES"]``, as a worker imports them, so ``QueueMaxBackend`` registers them."""

from __future__ import annotations

from django.tasks import TaskContext, task


@task
def add(a: int, b: int) -> int:
    return a + b


@task(takes_context=True)
def attempt(context: TaskContext, label: str) -> str:
    return f"{label} {context.attempt}"
