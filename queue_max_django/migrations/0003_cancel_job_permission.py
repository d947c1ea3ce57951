"""The ``cancel_job`` permission: cancelling a running job in the admin (its worker stops it)."""

from __future__ import annotations

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("queue_max_django", "0002_postgres_store")]

    operations = [
        migrations.AlterModelOptions(
            name="job",
            options={
                "verbose_name": "job",
                "verbose_name_plural": "jobs",
                "managed": False,
                "default_permissions": ("view", "change", "delete"),
                "permissions": [("cancel_job", "Can cancel a running job (its worker stops it)")],
            },
        ),
    ]
