"""QUEUE_MAX -> QueueMaxConfig (defaults, merging, caching, errors), and get_queue(): the engine's door."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from queue_max_django import conf
from queue_max_django.conf import (
    CircuitBreakerConfig,
    QueueMaxConfig,
    WorkerConfig,
    defaults,
    get_config,
    get_queue,
)
from queue_max_django.engine import Queue, State, parse_rate
from tests.engine.locations import StoreLocation

Configure = Callable[..., override_settings]
ROOT = Path(__file__).resolve().parents[2]

DEFAULT_WORKER = WorkerConfig(
    processes=None,
    threads=1,
    queues=None,
    shutdown_timeout=30.0,
    max_jobs=None,
    max_memory_mb=None,
    burst_wait=0.0,
)


def default_config(data_dir: Path) -> QueueMaxConfig:
    return QueueMaxConfig(
        data_dir=data_dir,
        shards=None,
        lease_time=30.0,
        max_retries=3,
        retry_backoff=1.0,
        retry_backoff_max=3600.0,
        result_ttl=86400.0,
        max_payload_bytes=1048576,
        sync=False,
        queues=None,
        rate_limit=None,
        queue_rate_limits={},
        queue_concurrency={},
        circuit_breaker=CircuitBreakerConfig(threshold=5, timeout=60.0),
        alert_threshold=None,
        timeout=None,
        immediate=False,
        enqueue_on_commit=True,  # a job enqueued in a transaction is stored at its commit
        worker=DEFAULT_WORKER,
    )


# ------------------------------------------------------------------------------------------------ config


def test_defaults_with_data_dir_under_base_dir(tmp_path: Path) -> None:
    with override_settings(QUEUE_MAX={}, BASE_DIR=tmp_path):
        assert get_config() == default_config(tmp_path / "queue_max_data")


@pytest.mark.store_neutral
def test_defaults_without_a_queue_max_setting(settings: Any, tmp_path: Path) -> None:
    del settings.QUEUE_MAX
    settings.BASE_DIR = str(tmp_path)
    assert get_config() == default_config(tmp_path / "queue_max_data")


@pytest.mark.store_neutral
def test_every_key_is_read(queue_max: Configure, data_dir: Path) -> None:
    with queue_max(
        SHARDS=4,
        LEASE_TIME=10,
        MAX_RETRIES=0,
        RETRY_BACKOFF=0,
        RETRY_BACKOFF_MAX=60,
        RESULT_TTL=5,
        MAX_PAYLOAD_BYTES=4096,
        SYNC=True,
        QUEUES=["default", "emails"],
        RATE_LIMIT=100,
        QUEUE_RATE_LIMITS={"emails": "10/s"},
        QUEUE_CONCURRENCY={"emails": 3},
        CIRCUIT_BREAKER={"THRESHOLD": 2, "TIMEOUT": 30},
        ALERT_THRESHOLD=500,
        TIMEOUT=120,
        IMMEDIATE=True,
        ENQUEUE_ON_COMMIT=False,
        WORKER={
            "PROCESSES": 2,
            "THREADS": 4,
            "QUEUES": ["emails"],
            "SHUTDOWN_TIMEOUT": 5,
            "MAX_JOBS": 100,
            "MAX_MEMORY_MB": 256,
            "BURST_WAIT": 2,
        },
    ):
        config = get_config()
    assert config == QueueMaxConfig(
        data_dir=data_dir,
        shards=4,
        lease_time=10.0,
        max_retries=0,
        retry_backoff=0.0,
        retry_backoff_max=60.0,
        result_ttl=5.0,
        max_payload_bytes=4096,
        sync=True,
        queues=("default", "emails"),
        rate_limit=parse_rate("100/m"),
        queue_rate_limits={"emails": parse_rate("10/s")},
        queue_concurrency={"emails": 3},
        circuit_breaker=CircuitBreakerConfig(threshold=2, timeout=30.0),
        alert_threshold=500,
        timeout=120.0,
        immediate=True,
        enqueue_on_commit=False,
        worker=WorkerConfig(
            processes=2,
            threads=4,
            queues=("emails",),
            shutdown_timeout=5.0,
            max_jobs=100,
            max_memory_mb=256,
            burst_wait=2.0,
        ),
    )
    assert isinstance(config.lease_time, float) and isinstance(config.worker.burst_wait, float)


@pytest.mark.store_neutral
def test_nested_dicts_merge_over_their_defaults(queue_max: Configure) -> None:
    with queue_max(CIRCUIT_BREAKER={"THRESHOLD": 3}, WORKER={"THREADS": 8}):
        config = get_config()
    assert config.circuit_breaker == CircuitBreakerConfig(threshold=3, timeout=60.0)
    assert config.worker == WorkerConfig(
        processes=None,
        threads=8,
        queues=None,
        shutdown_timeout=30.0,
        max_jobs=None,
        max_memory_mb=None,
        burst_wait=0.0,
    )


def test_data_dir_wins_over_base_dir(tmp_path: Path) -> None:
    with override_settings(QUEUE_MAX={"DATA_DIR": str(tmp_path / "jobs")}, BASE_DIR=tmp_path / "project"):
        assert get_config().data_dir == tmp_path / "jobs"


@pytest.mark.store_neutral
def test_the_config_is_frozen(queue_max: Configure) -> None:
    with queue_max(QUEUE_RATE_LIMITS={"emails": "1/s"}):
        config = get_config()
    with pytest.raises(AttributeError):
        config.lease_time = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.queue_rate_limits["sms"] = parse_rate("1/s")  # type: ignore[index]


def test_defaults_are_read_only() -> None:
    with pytest.raises(TypeError):
        defaults.DEFAULTS["SHARDS"] = 8  # type: ignore[index]
    with pytest.raises(TypeError):
        defaults.DEFAULTS["WORKER"]["THREADS"] = 8


@pytest.mark.parametrize(
    ("settings_kwargs", "check_id"),
    [
        ({"QUEUE_MAX": {"LEASE_TIME": 0, "DATA_DIR": "/tmp/x"}}, "queue_max_django.E004"),
        ({"QUEUE_MAX": {}, "BASE_DIR": None}, "queue_max_django.E008"),
        ({"QUEUE_MAX": "nope"}, "queue_max_django.E001"),
        ({"QUEUE_MAX": {"RATE_LIMIT": "fast", "DATA_DIR": "/tmp/x"}}, "queue_max_django.E006"),
    ],
)
def test_a_bad_config_fails_loudly(settings_kwargs: dict[str, Any], check_id: str) -> None:
    with override_settings(**settings_kwargs), pytest.raises(ImproperlyConfigured, match=check_id):
        get_config()
    with override_settings(**settings_kwargs), pytest.raises(ImproperlyConfigured):
        get_queue()


def test_warnings_do_not_stop_the_config(tmp_path: Path) -> None:
    with override_settings(QUEUE_MAX={"DATA_DIR": "relative/store"}):
        assert get_config().data_dir == Path("relative/store")


def test_every_key_is_documented() -> None:
    docs = (ROOT / "docs" / "reference" / "settings.md").read_text()
    for key in defaults.DEFAULTS:
        assert f"| `{key}` |" in docs, key
    for nested in defaults.NESTED_DEFAULTS.values():
        for key in nested:
            assert f"`{key}`" in docs, key


# ------------------------------------------------------------------------------------------ cache, reset


@pytest.mark.store_neutral
def test_the_config_is_cached(queue_max: Configure) -> None:
    with queue_max(LEASE_TIME=7):
        assert get_config() is get_config()


@pytest.mark.store_neutral
def test_override_settings_resets_the_config(queue_max: Configure, data_dir: Path) -> None:
    with queue_max(LEASE_TIME=7):
        assert get_config().lease_time == 7.0
        with override_settings(QUEUE_MAX={"DATA_DIR": data_dir, "LEASE_TIME": 8}):
            assert get_config().lease_time == 8.0
        assert get_config().lease_time == 7.0


def test_base_dir_change_resets_the_config(tmp_path: Path) -> None:
    with override_settings(QUEUE_MAX={}, BASE_DIR=tmp_path / "a"):
        assert get_config().data_dir == tmp_path / "a" / "queue_max_data"
        with override_settings(BASE_DIR=tmp_path / "b"):
            assert get_config().data_dir == tmp_path / "b" / "queue_max_data"


@pytest.mark.store_neutral
def test_other_settings_keep_the_cache(queue_max: Configure) -> None:
    with queue_max():
        config = get_config()
        queue = get_queue()
        with override_settings(USE_TZ=False):
            assert get_config() is config
            assert get_queue() is queue
        assert not queue.closed


# ------------------------------------------------------------------------------------------------- queue


@pytest.mark.lmdb  # its data directory and shards (test_pg_commands.py opens the PostgreSQL store)
def test_get_queue_opens_a_working_store_in_data_dir(queue_max: Configure, data_dir: Path) -> None:
    with queue_max(SHARDS=2):
        queue = get_queue()
        job_id = queue.put({"to": "ada@example.com"}, name="mail.send")
        record = queue.get(0)
        assert record.job_id == job_id and record.payload == {"to": "ada@example.com"}
        record.ack(result="sent")
        assert (data_dir / "store.json").is_file()
        assert queue.path == os.path.realpath(data_dir)
    with Queue(data_dir, do_recover=False, do_vacuum=False) as again:  # what is on disk, seen afresh
        job = again.job(job_id)
        assert job is not None and job.state is State.DONE and job.result == "sent"
        assert again.shard_count == 2


@pytest.mark.lmdb  # SHARDS and SYNC too (test_pg_commands.py maps the PostgreSQL store's keys)
def test_get_queue_maps_every_engine_setting(queue_max: Configure) -> None:
    with queue_max(
        SHARDS=3,
        LEASE_TIME=12,
        MAX_RETRIES=7,
        RETRY_BACKOFF=0.5,
        RETRY_BACKOFF_MAX=99,
        RESULT_TTL=600,
        MAX_PAYLOAD_BYTES=2048,
        SYNC=True,
        QUEUES=["default", "emails"],
        ALERT_THRESHOLD=10,
    ):
        queue = get_queue()
        assert (queue.shard_count, queue.lease_time, queue.max_retries) == (3, 12.0, 7)
        assert (queue.retry_backoff, queue.retry_backoff_max, queue.result_ttl) == (0.5, 99.0, 600.0)
        assert (queue.max_payload_bytes, queue.sync, queue.alert_threshold) == (2048, True, 10)
        assert queue.queues == frozenset({"default", "emails"})


@pytest.mark.store_neutral
def test_get_queue_is_cached_per_config(queue_max: Configure) -> None:
    with queue_max():
        first = get_queue()
        assert get_queue() is first
    assert first.closed  # leaving override_settings changed QUEUE_MAX: the queue was closed


@pytest.mark.store_neutral
def test_get_queue_is_rebuilt_when_settings_change(queue_max: Configure, tmp_path: Path) -> None:
    with queue_max(LEASE_TIME=5):
        first = get_queue()
        with override_settings(QUEUE_MAX={"DATA_DIR": tmp_path / "other", "LEASE_TIME": 6}):
            second = get_queue()
            assert first.closed and not second.closed
            assert second.lease_time == 6.0 and second.path == os.path.realpath(tmp_path / "other")
        third = get_queue()
        assert second.closed and third.lease_time == 5.0


@pytest.mark.store_neutral
def test_threads_reading_a_fresh_config_share_one_queue(queue_max: Configure) -> None:
    """A worker thread's get_queue() and the main thread's get_config() (a .delay()) right after the settings
    changed build one config, not one each: with two, the next get_queue() saw "another config" and closed
    the queue the worker thread was reading (the docs' worker thread failed so, once in a CI run)."""
    with queue_max():
        for _ in range(30):
            conf.reset()
            start = threading.Barrier(4)
            seen: list[object] = []

            def read(start: threading.Barrier, seen: list[object]) -> None:
                start.wait()
                seen.append(get_config())

            threads = [threading.Thread(target=read, args=(start, seen)) for _ in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(10)
            assert len(seen) == 4 and all(config is seen[0] for config in seen)
            queue = get_queue()
            assert get_config() is seen[0] and not queue.closed


@pytest.mark.store_neutral
def test_a_closed_queue_is_replaced(queue_max: Configure) -> None:
    with queue_max():
        first = get_queue()
        first.close()
        second = get_queue()
        assert second is not first and not second.closed


@pytest.mark.store_neutral
def test_reset_closes_the_queue(queue_max: Configure) -> None:
    with queue_max():
        queue = get_queue()
        conf.reset()
        assert queue.closed
        assert conf._cache.config is None


@pytest.mark.store_neutral
def test_a_forked_child_builds_its_own_queue(queue_max: Configure, monkeypatch: pytest.MonkeyPatch) -> None:
    with queue_max():
        parent = get_queue()
        monkeypatch.setattr("queue_max_django.conf.os.getpid", lambda: -1)
        monkeypatch.setattr("queue_max_django.conf._pid", -1)  # what its at-fork hook sets in a child
        child = get_queue()
        assert child is not parent
        assert not parent.closed  # the parent's queue is not the child's to close
        parent.close()


def test_rate_limits_are_applied(queue_max: Configure, location: StoreLocation) -> None:
    with queue_max(RATE_LIMIT="10/s", QUEUE_RATE_LIMITS={"emails": "160/m", "sms": 30}):
        limits = get_queue().rate_limits()
    expected = {"*": parse_rate("10/s"), "queue:emails": parse_rate("160/m"), "queue:sms": parse_rate(30)}
    assert limits == expected
    with location.open_queue() as again:  # in the store, for every process
        assert again.rate_limits() == expected


def test_rate_limits_follow_the_settings(queue_max: Configure) -> None:
    with queue_max(RATE_LIMIT="10/s", QUEUE_RATE_LIMITS={"emails": "160/m", "sms": "1/s"}):
        queue = get_queue()
        queue.set_rate_limit("name:mail.send", "5/s")  # a task's limit: not the settings' to remove
    with queue_max(QUEUE_RATE_LIMITS={"emails": "20/m"}):
        limits = get_queue().rate_limits()
    assert limits == {"queue:emails": parse_rate("20/m"), "name:mail.send": parse_rate("5/s")}


def test_an_unchanged_limit_keeps_its_tokens(queue_max: Configure) -> None:
    with queue_max(RATE_LIMIT=2):
        queue = get_queue()
        assert queue.try_acquire("*") and queue.try_acquire("*")
        assert not queue.try_acquire("*")
    with queue_max(RATE_LIMIT=2, LEASE_TIME=5):  # another config, the same limit: the bucket stays empty
        assert not get_queue().try_acquire("*")


def test_get_queue_stores_nothing_but_limits(queue_max: Configure) -> None:
    with queue_max(CIRCUIT_BREAKER={"THRESHOLD": 2}):
        queue = get_queue()
        assert queue.circuit_breakers() == {}
        assert queue.rate_limits() == {}
        assert queue.stats()["total"] == 0


# ------------------------------------------------------------------------------------- nothing at import


def run_python(code: str) -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env=env)


def test_importing_the_package_does_not_import_django() -> None:
    run_python("import sys, queue_max_django; assert 'django' not in sys.modules, sorted(sys.modules)")


def test_django_setup_opens_no_store() -> None:
    run_python(
        "import django; django.setup()\n"
        "from django.conf import settings\n"
        "from queue_max_django import conf\n"
        "assert conf._cache.config is None and conf._cache.queue is None\n"
        "assert not settings.BASE_DIR.exists(), settings.BASE_DIR\n"
    )
