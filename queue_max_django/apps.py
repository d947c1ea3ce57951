"""The app's entry point: on start-up, register the system checks and the schema upgrade after ``migrate``,
and import each installed app's tasks."""

from __future__ import annotations

from django.apps import AppConfig
from django.core import checks
from django.db.models.signals import post_migrate
from django.utils.module_loading import autodiscover_modules

from .conf import teststore
from .conf.checks import TAG, check_settings


class QueueMaxAppConfig(AppConfig):
    name = "queue_max_django"
    verbose_name = "Queue Max"

    def ready(self) -> None:
        # a process that a test started: the store's alias names the test run's database, before anything
        # connects (teststore.py)
        teststore.adopt_test_database()
        checks.register(check_settings, TAG)
        from .observability.checks import check_metrics_extra

        checks.register(check_metrics_extra, TAG, checks.Tags.urls)
        from .conf import upgrade_after_migrate

        # migrate brings the PostgreSQL store's tables to this code's schema version (the store kind's)
        post_migrate.connect(upgrade_after_migrate, sender=self, dispatch_uid="queue_max_django.tables")
        autodiscover_modules("tasks")
