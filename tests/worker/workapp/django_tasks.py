"""A ``django.tasks`` task for the worker tests that configure ``QueueMaxBackend`` (Django >= 6.0): not
autodiscovered (only ``tasks.py`` is), but listed in the backend's ``OPTIONS["MODULES"]``
(tests/worker/settings.py)."""

from __future__ import annotations

from django.tasks import task


@task
def double(value: int) -> int:
    return 2 * value
