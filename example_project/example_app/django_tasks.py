"""A task of Django's own Tasks framework (``django.tasks``, Django >= 6.0), run by queue_max's backend.

This module is not a ``tasks.py`` on purpose: on Django 5.2 there is no ``django.tasks``, and nothing imports
this module there. On Django 6 it is listed in ``TASKS["default"]["OPTIONS"]["MODULES"]`` (settings.py), so
the worker knows its tasks. The code uses ``django.tasks`` only: it would run unchanged on any other
``django.tasks`` backend.
"""

from __future__ import annotations

from django.tasks import task


@task(priority=5, queue_name="default")
def make_invoice_number(order_id: int) -> str:
    return f"INV-{order_id:06d}"
