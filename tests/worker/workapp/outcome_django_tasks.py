"""A ``django.tasks`` task (Django >= 6.0) whose outcome the store cannot take as it is
(tests/faults/test_unfinishable_outcome.py): the twin of ``outcomes.unfinishable``. Not autodiscovered; listed
in the backend's ``OPTIONS["MODULES"]`` when ``$QUEUE_MAX_TEST_DJANGO_TASKS`` is ``outcomes``
(tests/worker/settings.py)."""

from __future__ import annotations

from django.tasks import task

from .outcomes import leave


@task
def unfinishable(trigger: str) -> object:
    return leave(trigger)
