from __future__ import annotations

from django.apps import AppConfig


class ExampleAppConfig(AppConfig):
    name = "example_app"
    verbose_name = "Queue example"
