"""Invariant 7 at the Django layer: ``.delay()`` and friends refuse bad input with a clear exception naming
what is wrong, and nothing reaches the store (checked on disk). The engine's own refusals are in
tests/engine/test_bad_input.py; the arguments msgpack cannot encode, in tests/django/test_tasks.py."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from queue_max_django import conf
from queue_max_django.engine import InvalidJob, PayloadTooLarge, Queue, UnknownQueue
from tests.testapp import tasks


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "store"
    conf.reset()
    with override_settings(
        QUEUE_MAX={"DATA_DIR": path, "MAX_PAYLOAD_BYTES": 1024, "QUEUES": ["default", "mail"]}
    ):
        yield path
    conf.reset()


def nothing_stored(path: Path) -> None:
    conf.reset()
    with Queue(path, do_recover=False, do_vacuum=False) as q:
        assert q.stats()["total"] == 0 and q.verify() == []


BAD: list[tuple[str, Callable[[], Any], type[Exception], str]] = [
    ("too-large", lambda: tasks.echo.delay("x" * 2000), PayloadTooLarge, "max_payload_bytes"),
    ("too-large-map", lambda: tasks.echo.map(["a", "x" * 2000]), PayloadTooLarge, "max_payload_bytes"),
    ("priority-high", lambda: tasks.add.using(priority=101).delay(1, 2), ValueError, "priority"),
    ("priority-low", lambda: tasks.add.using(priority=-101).delay(1, 2), ValueError, "priority"),
    ("priority-float", lambda: tasks.add.using(priority=1.5).delay(1, 2), ValueError, "priority"),  # type: ignore[arg-type]
    ("delay-negative", lambda: tasks.add.schedule_in(-1, 1, 2), InvalidJob, "delay"),
    ("delay-nan", lambda: tasks.add.schedule_in(math.nan, 1, 2), InvalidJob, "delay"),
    ("delay-huge", lambda: tasks.add.schedule_in(1e300, 1, 2), InvalidJob, "delay"),
    ("eta-naive", lambda: tasks.add.schedule_at(dt.datetime(2030, 1, 1), 1, 2), InvalidJob, "aware"),
    ("queue-unknown", lambda: tasks.add.using(queue="sms").delay(1, 2), UnknownQueue, "'sms'"),
    ("queue-empty", lambda: tasks.add.using(queue="").delay(1, 2), InvalidJob, "queue"),
    ("queue-too-long", lambda: tasks.add.using(queue="q" * 101).delay(1, 2), InvalidJob, "queue"),
]


@pytest.mark.inv_7
@pytest.mark.parametrize(("call", "error", "named"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_to_delay_is_refused_before_anything_is_written(
    store: Path, call: Callable[[], Any], error: type[Exception], named: str
) -> None:
    with pytest.raises(error, match=named):
        call()
    nothing_stored(store)
