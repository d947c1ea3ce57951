"""The system check of the metrics view: the project's URLconf includes ``queue_max_django.urls`` but the
``prometheus_client`` library (the ``metrics`` extra) is not installed, so every scrape would fail
(``queue_max_django.E027``, docs/reference/checks.md).

Whether the library is installed is asked of the import system (``find_spec``), without importing it, and
first: where it is, the check is done without importing the URLconf either (every ``queue_*`` command and
``queue_worker``'s start run this check)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Sequence
from typing import Any

from django.apps import AppConfig
from django.core import checks
from django.urls import URLResolver, get_resolver

from ..conf.problems import PREFIX
from .metrics import EXTRA_HINT

URLCONF = "queue_max_django.urls"


def includes_metrics(patterns: Iterable[Any]) -> bool:
    """Does this URLconf (its patterns, and the ones they include) include ``queue_max_django.urls``?"""
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            module = pattern.urlconf_name
            name = module if isinstance(module, str) else getattr(module, "__name__", None)
            if name == URLCONF or includes_metrics(pattern.url_patterns):
                return True
    return False


def check_metrics_extra(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    if importlib.util.find_spec("prometheus_client") is not None:
        return []
    try:
        included = includes_metrics(get_resolver().url_patterns)
    except Exception:  # a URLconf that does not import: Django's own URL checks report it
        return []
    if not included:
        return []
    return [
        checks.Error(
            f"The URLconf includes {URLCONF} (the Prometheus metrics), but the prometheus-client library "
            f"is not installed: every scrape would fail.",
            hint=f"Install the 'metrics' extra: {EXTRA_HINT}, or remove the include.",
            id=f"{PREFIX}.E027",
        )
    ]
