"""Opt-in URLs of the app: ``path("queue/", include("queue_max_django.urls"))`` serves ``queue/metrics/``,
the Prometheus metrics (observability/views.py; docs/howto/monitoring.md)."""

from __future__ import annotations

from django.urls import path

from .observability.views import metrics

app_name = "queue_max_django"
urlpatterns = [path("metrics/", metrics, name="metrics")]
