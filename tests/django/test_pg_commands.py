"""The maintenance commands and the config on the PostgreSQL store: ``queue_check`` runs ``verify()``,
``queue_compact`` says it is for LMDB, ``queue_stats`` shows the store without its password; and the
connection URL of an alias."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings
from psycopg.conninfo import conninfo_to_dict

from queue_max_django import conf
from queue_max_django.conf import get_queue, store_class
from queue_max_django.conf.storekinds.postgresql import database
from queue_max_django.conf.storekinds.postgresql.config import store_url
from queue_max_django.engine import State
from queue_max_django.engine.stores.lmdb.store import LmdbStore
from queue_max_django.engine.stores.postgres.store import PostgresStore

from .pgdjango import Configure, alias_settings, database_alias, sql
from .pgdjango import pg_alias as pg_alias
from .pgdjango import pg_store as pg_store


def call(*argv: str) -> str:
    out = io.StringIO()
    call_command(*argv, stdout=out)
    return out.getvalue()


def fill(count: int = 3) -> list[int]:
    """``count`` jobs, one of them done and one running."""
    queue = get_queue()
    ids = [queue.put({"n": n}, name="tests.filled") for n in range(count)]
    queue.get(timeout=0).ack("done")
    queue.get(timeout=0)  # left running, its lease held
    return ids


def test_queue_check_verifies_the_postgresql_store(pg_store: Configure, pg_url: str) -> None:
    with pg_store():
        fill()
        url = get_queue().path
        assert call("queue_check") == (
            f"The PostgreSQL store {url} is consistent (3 jobs): its counters match its job rows and every "
            f"running job has a lease.\n"
        )
        assert json.loads(call("queue_check", "--json")) == {
            "ok": True,
            "store": url,
            "shards": 1,
            "jobs": 3,
            "problems": [],
        }
        sql(  # one counter row of the pending jobs counts two too many
            pg_url,
            "UPDATE qm_counts SET n = n + 2 WHERE ctid = "
            "(SELECT ctid FROM qm_counts WHERE queue = 'default' AND state = 0 LIMIT 1)",
        )

        out = io.StringIO()
        with pytest.raises(
            CommandError, match=r"1 problem\(s\) in the store\. .* copy of the database \(pg_dump\)"
        ):
            call_command("queue_check", stdout=out)
        assert out.getvalue() == (
            f"The store {url} has 1 problem(s):\n  queue 'default': 1 pending jobs, but the counters say 3\n"
        )


def test_queue_compact_says_it_is_for_lmdb(pg_store: Configure, pg_url: str) -> None:
    with pg_store():
        fill()
        before = sql(
            pg_url, "SELECT id, state FROM qm_jobs UNION ALL SELECT id, state FROM qm_finished ORDER BY 1"
        )
        with pytest.raises(CommandError) as raised:
            call("queue_compact")
    assert str(raised.value) == (
        "The postgresql store cannot be compacted offline: nothing was changed. queue_compact is for the "
        "LMDB store (it rewrites LMDB's files). PostgreSQL reclaims the space of finished and deleted jobs "
        "itself: autovacuum (the store's tables carry their own autovacuum settings) makes it reusable "
        'while the workers run. See docs/howto/postgresql.md, "What to monitor".'
    )
    after = sql(
        pg_url, "SELECT id, state FROM qm_jobs UNION ALL SELECT id, state FROM qm_finished ORDER BY 1"
    )
    assert after == before


def test_queue_stats_shows_the_store_without_its_password(pg_url: str, django_db_blocker: Any) -> None:
    entry = {**alias_settings(pg_url), "PASSWORD": "s3cret"}  # trust authentication: any password does
    with (
        django_db_blocker.unblock(),
        database_alias("secret", entry),
        override_settings(QUEUE_MAX={"STORE": "postgresql", "DATABASE": "secret"}),
    ):
        fill()
        text, data = call("queue_stats"), json.loads(call("queue_stats", "--json"))
    assert "s3cret" not in text + json.dumps(data)
    assert text.startswith("Store postgresql://postgres:***@/?dbname=")
    assert (data["pending"], data["running"], data["done"], data["total"]) == (1, 1, 1, 3)
    assert (data["shard_count"], data["queues"]) == (
        1,
        {"default": {"pending": 1, "scheduled": 0, "running": 1}},
    )


def test_the_store_class_and_the_queue_the_settings_name(pg_store: Configure, pg_url: str) -> None:
    with pg_store(LISTEN=False, NOTIFY=False, POLL_INTERVAL=0.05, LEASE_TIME=7):
        config = conf.get_config()
        assert store_class(config) is PostgresStore and PostgresStore.transactional_enqueue
        queue = get_queue()
        assert (queue.lease_time, queue.shard_count) == (7.0, 1)
        store = queue._store
        assert isinstance(store, PostgresStore)
        assert (store.hints.listen, store.hints.sends) == (False, False)
        job_id = queue.put({"x": 1})
        assert sql(pg_url, "SELECT id, state FROM qm_jobs") == [(job_id, 0)]
        assert queue.job(job_id).state is State.PENDING  # type: ignore[union-attr]
    with override_settings(QUEUE_MAX={}):
        assert store_class(conf.get_config()) is LmdbStore


def test_an_alias_becomes_a_url_with_every_parameter(django_db_blocker: Any) -> None:
    entry = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "shop db",
        "USER": "app",
        "PASSWORD": "p@ss w/rd",
        "HOST": "/var/run/postgresql",
        "PORT": 6432,
        "OPTIONS": {
            "sslmode": "require",
            "options": "-c search_path=jobs",
            "pool": True,
            "isolation_level": 1,
        },
    }
    with database_alias("shop", entry):
        url = database.alias_url("shop")
    assert url.startswith("postgresql://app:p%40ss%20w%2Frd@/?")
    assert conninfo_to_dict(url) == {
        "user": "app",
        "password": "p@ss w/rd",
        "dbname": "shop db",
        "host": "/var/run/postgresql",
        "port": "6432",
        "sslmode": "require",
        "options": "-c search_path=jobs",
    }
    with database_alias("bare", {"ENGINE": "django.db.backends.postgresql", "NAME": None}):
        assert conninfo_to_dict(database.alias_url("bare")) == {"dbname": "postgres"}


def test_the_alias_connection_reaches_the_database(pg_store: Configure, pg_url: str) -> None:
    with pg_store():
        assert (
            conninfo_to_dict(store_url(conf.get_config().postgres))["dbname"]  # type: ignore[arg-type]
            == conninfo_to_dict(pg_url)["dbname"]
        )
