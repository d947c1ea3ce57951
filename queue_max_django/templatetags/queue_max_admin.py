"""Filters of the admin's queue pages (``{% load queue_max_admin %}``): display.py's wording, in templates.

Django imports this module when it sets up its templates in any process, so display.py (which reaches the
task registry) is imported on the first use of a filter, not here.
"""

from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def error_class(error_type: str | None) -> str:
    """``queue_max_django.engine.cancels.Cancelled`` -> ``Cancelled`` (display.class_name)."""
    from ..admin.display import class_name

    return class_name(error_type)
