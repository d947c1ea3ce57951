"""An unmanaged model with no table: it only gives the admin its index entry ("Queue Max", "Jobs") and
Django's permissions over the queue (view, change = retry/cancel a waiting job, delete = delete/purge, and
``cancel_job`` = cancel a running job: ask its worker to stop it, ``pause_queue`` = pause and resume a
queue or a task of it).

Jobs live in the engine's store, never in the database; nothing ever queries this model.
"""

from __future__ import annotations

from django.db import models


class Job(models.Model):
    """Stands for the jobs of the store in the admin and in ``auth.Permission`` (``queue_max_django.view_job``
    and friends). There is no add permission: jobs are enqueued by code."""

    class Meta:
        managed = False
        default_permissions = ("view", "change", "delete")
        permissions = [
            ("cancel_job", "Can cancel a running job (its worker stops it)"),
            ("pause_queue", "Can pause and resume a queue (or a task of a queue)"),
        ]
        verbose_name = "job"
        verbose_name_plural = "jobs"

    def __str__(self) -> str:
        return f"job {self.pk}" if isinstance(self.pk, int) else str(self.pk)  # (a queue: admin/pausing.py)
