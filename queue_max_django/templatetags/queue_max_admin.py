"""Filters of the admin's queue pages (``{% load queue_max_admin %}``): display.py's wording, in templates.

Django imports this module when it sets up its templates in any process, so display.py (which reaches the
task registry) is imported on the first use of a filter, not here.
"""

from __future__ import annotations

from django import template
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

register = template.Library()


@register.filter
def error_class(error_type: str | None) -> str:
    """``queue_max_django.engine.cancels.Cancelled`` -> ``Cancelled`` (display.class_name)."""
    from ..admin.display import class_name

    return class_name(error_type)


@register.filter
def dotted_breaks(name: str | None) -> SafeString:
    """A dotted name that may wrap after each dot (``shop.tasks.<wbr>send_receipt``), escaped: a list's task
    column gives way before the error column does, and never breaks inside a word."""
    return mark_safe(escape(name or "").replace(".", ".<wbr>"))  # escaped first; <wbr> is ours
