"""The unmanaged ``Job`` model: no table, only its content type and permissions."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    operations = [
        migrations.CreateModel(
            name="Job",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
            ],
            options={
                "verbose_name": "job",
                "verbose_name_plural": "jobs",
                "managed": False,
                "default_permissions": ("view", "change", "delete"),
            },
        ),
    ]
