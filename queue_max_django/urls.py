"""Opt-in URLs of the app: ``path("queue/", include("queue_max_django.urls"))`` serves ``queue/metrics/``,
the Prometheus metrics (metrics_view.py; docs/howto/monitoring.md)."""

from __future__ import annotations

from django.urls import path

from .metrics_view import metrics

app_name = "queue_max_django"
urlpatterns = [path("metrics/", metrics, name="metrics")]
