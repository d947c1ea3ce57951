from __future__ import annotations

from django.urls import path

from . import views

app_name = "example_app"
urlpatterns = [
    path("", views.index, name="index"),
    path("enqueue/", views.enqueue, name="enqueue"),
    path("jobs.json", views.jobs_json, name="jobs_json"),
]
