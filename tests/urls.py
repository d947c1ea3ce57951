"""URLs of the test suite: the Django admin, where the queue's pages live, and the metrics view."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("queue/", include("queue_max_django.urls")),
]
