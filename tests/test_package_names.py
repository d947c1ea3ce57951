"""The everyday names come from the package itself (``from queue_max_django import task, JobResult,
Permanent``), loaded on first access, each the very object of the module that defines it."""

from __future__ import annotations

import importlib

import pytest

import queue_max_django

HOMES = {
    "task": "queue_max_django.tasks",
    "retryable_task": "queue_max_django.tasks",
    "periodic_task": "queue_max_django.periodic",
    "Permanent": "queue_max_django.engine",
    "Retry": "queue_max_django.engine",
    "Cancelled": "queue_max_django.engine",
    "DuplicateJob": "queue_max_django.engine",
    "JobResult": "queue_max_django.results",
    "JobStatus": "queue_max_django.results",
    "JobNotFound": "queue_max_django.results",
    "JobMismatch": "queue_max_django.results",
    "JobNotCommitted": "queue_max_django.results",
    "current_job": "queue_max_django.context",
    "JobContext": "queue_max_django.context",
    "NoCurrentJob": "queue_max_django.context",
    "chain": "queue_max_django.workflows",
    "group": "queue_max_django.workflows",
    "chord": "queue_max_django.workflows",
    "Workflow": "queue_max_django.workflows",
    "WorkflowResult": "queue_max_django.workflows",
}


def test_every_exported_name_has_a_home_and_none_is_left_out() -> None:
    assert sorted(queue_max_django.__all__) == sorted(HOMES)


@pytest.mark.parametrize("name", sorted(HOMES))
def test_a_package_name_is_its_module_s_object(name: str) -> None:
    assert getattr(queue_max_django, name) is getattr(importlib.import_module(HOMES[name]), name)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Tsak'"):
        queue_max_django.Tsak  # noqa: B018


def test_a_task_can_raise_what_the_package_exports() -> None:
    from queue_max_django import JobResult, Permanent, Retry
    from queue_max_django.engine.classify import classify

    assert classify(Permanent("no such user")).retry is False
    assert classify(Retry("later", delay=5)).retry is True
    assert JobResult.__module__ == "queue_max_django.results"
