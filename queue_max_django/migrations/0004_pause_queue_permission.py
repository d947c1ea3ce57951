"""The ``pause_queue`` permission: pausing and resuming queues (or tasks of a queue) in the admin."""

from __future__ import annotations

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("queue_max_django", "0003_cancel_job_permission")]

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
                ],
            },
        ),
    ]
