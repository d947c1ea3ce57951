"""The example's URLs: the batch page and its JSON, and the admin (where the queue's pages live)."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("example_app.urls")),
]
