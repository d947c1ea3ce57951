"""A small row: what ``.delay()`` inside ``transaction.atomic()`` is measured against (its ORM ``create()``,
benchmarks/peers_postgres.py)."""

from django.db import models


class Row(models.Model):
    n = models.IntegerField()
