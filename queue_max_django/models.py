"""An unmanaged model with no table: it only gives the admin its index entry ("Queue Max", "Jobs") and
Django's permissions over the queue (view, change = retry/cancel a waiting job, delete = delete/purge, and
``cancel_job`` = cancel a running job: ask its worker to stop it, ``pause_queue`` = pause and resume a
queue or a task of it, ``view_job_payload`` = read an encrypted job's arguments, result, metadata and
traceback, and search encrypted tasks' arguments). A second one, ``Schedule``, does the same for the
schedules' page (admin/schedules.py).

Jobs and schedules live in the engine's store, never in the database; nothing ever queries this model.
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
            ("view_job_payload", "Can read encrypted jobs' arguments, results and tracebacks"),
        ]
        verbose_name = "job"
        verbose_name_plural = "jobs"

    def __str__(self) -> str:
        return f"job {self.pk}" if isinstance(self.pk, int) else str(self.pk)  # (a queue: admin/pausing.py)


class Schedule(models.Model):
    """Stands for the schedules (code-declared and kept in the store) in the admin's index and in
    ``auth.Permission``: ``view_schedule``, ``add_schedule``, ``change_schedule`` (edit, pause, resume, run
    now) and ``delete_schedule``. The schedules live in the store (``Queue.schedules``), never in the
    database; ``name`` is the primary key only so that the admin's log links to a schedule's page."""

    name = models.CharField(primary_key=True, max_length=200)

    class Meta:
        managed = False
        default_permissions = ("view", "add", "change", "delete")
        verbose_name = "schedule"
        verbose_name_plural = "schedules"

    def __str__(self) -> str:
        return str(self.pk)
