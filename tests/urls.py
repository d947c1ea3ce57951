"""URLs of the test suite: the Django admin, where the queue's pages live."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path

urlpatterns = [
    path("admin/", admin.site.urls),
]
