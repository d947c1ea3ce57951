"""The app's entry point: on start-up, register the system checks and the schema upgrade after ``migrate``,
and import each installed app's tasks. In ``queue_worker``'s process, a SIGTERM or Ctrl-C from the moment
Django makes this app's config on ends the command with status 0 (worker/earlystop.py)."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.core import checks
from django.db.models.signals import post_migrate
from django.utils.module_loading import autodiscover_modules

from .worker import earlystop


class QueueMaxAppConfig(AppConfig):
    name = "queue_max_django"
    verbose_name = "Queue Max"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if earlystop.install():  # first, before the rest of Django's set-up: a stop meanwhile is graceful
            earlystop.reached("app")
        super().__init__(*args, **kwargs)

    def ready(self) -> None:  # the configuration is imported here, not above: after the early handlers
        from .conf import teststore, upgrade_after_migrate
        from .conf.checks import TAG, check_settings
        from .observability.checks import check_metrics_extra

        # a process that a test started: the store's alias names the test run's database, before anything
        # connects (teststore.py)
        teststore.adopt_test_database()
        checks.register(check_settings, TAG)
        checks.register(check_metrics_extra, TAG, checks.Tags.urls)
        # migrate brings the PostgreSQL store's tables to this code's schema version (the store kind's)
        post_migrate.connect(upgrade_after_migrate, sender=self, dispatch_uid="queue_max_django.tables")
        autodiscover_modules("tasks")
        if earlystop.installed():
            earlystop.reached("ready")
