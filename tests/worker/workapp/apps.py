from django.apps import AppConfig


class WorkappConfig(AppConfig):
    name = "tests.worker.workapp"
    label = "workapp"
