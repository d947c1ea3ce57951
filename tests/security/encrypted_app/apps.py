from __future__ import annotations

from django.apps import AppConfig


class EncryptedTasksConfig(AppConfig):
    name = "tests.security.encrypted_app"
    label = "queue_max_encrypted_tasks"

    def ready(self) -> None:
        from tests.testapp import encrypted_tasks

        encrypted_tasks.register()
