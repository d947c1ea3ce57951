"""The app's entry point: on start-up, register the system checks and import each installed app's tasks."""

from __future__ import annotations

from django.apps import AppConfig
from django.core import checks
from django.utils.module_loading import autodiscover_modules

from .checks import TAG, check_settings


class QueueMaxAppConfig(AppConfig):
    name = "queue_max_django"
    verbose_name = "Queue Max"

    def ready(self) -> None:
        checks.register(check_settings, TAG)
        autodiscover_modules("tasks")
