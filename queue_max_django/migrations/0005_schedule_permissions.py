"""The ``Schedule`` admin entry and its permissions (``view``, ``add``, ``change``, ``delete`` schedule):
an unmanaged model, so no table is made; the schedules live in the store."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("queue_max_django", "0004_pause_queue_permission")]

    operations = [
        migrations.CreateModel(
            name="Schedule",
            fields=[("name", models.CharField(max_length=200, primary_key=True, serialize=False))],
            options={
                "verbose_name": "schedule",
                "verbose_name_plural": "schedules",
                "managed": False,
                "default_permissions": ("view", "add", "change", "delete"),
            },
        ),
    ]
