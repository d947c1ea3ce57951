"""The ``view_job_payload`` permission: reading an encrypted job's arguments, result, metadata and traceback
in the admin (each view is written to the admin's log), and searching encrypted tasks' arguments."""

from __future__ import annotations

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("queue_max_django", "0005_schedule_permissions")]

    operations = [
        migrations.AlterModelOptions(
            name="job",
            options={
                "verbose_name": "job",
                "verbose_name_plural": "jobs",
                "managed": False,
                "default_permissions": ("view", "change", "delete"),
                "permissions": [
                    ("cancel_job", "Can cancel a running job (its worker stops it)"),
                    ("pause_queue", "Can pause and resume a queue (or a task of a queue)"),
                    ("view_job_payload", "Can read encrypted jobs' arguments, results and tracebacks"),
                ],
            },
        ),
    ]
