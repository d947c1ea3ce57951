"""``manage.py queue_transfer``: LMDB -> PostgreSQL and back, every kind of job read the same in the target
as in the source, by the same id; pauses, rate limits and breakers carried; ``--dry-run`` and ``--json``; the
refusals (a running job, a live worker, a target with too few shards, unknown names)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from queue_max_django.engine import Queue

pytestmark = [pytest.mark.store_neutral, pytest.mark.postgres]


def call(*argv: str) -> str:
    out = io.StringIO()
    call_command("queue_transfer", *argv, stdout=out)
    return out.getvalue()


def fill(queue: Queue) -> list[int]:
    """A job of every kind that moves: waiting (two priorities, metadata, a partition key, a big payload,
    a concurrency limit), scheduled, retried, done with a result, a dead letter, a cancelled one."""
    ids = [
        queue.put({"n": 1}, priority=5, name="t.a", metadata={"order": 42}, partition_key="p"),
        queue.put({"n": 2}, queue="mail", max_retries=7, timeout=3.5),
        queue.put("x" * 4000, delay=3600),
        queue.put({"n": 4}, concurrency=[("tenant:1", 2)]),
        queue.put({"n": 5}, unique_key="order-7"),
    ]
    for n, outcome in enumerate(("done", "dead", "retried")):
        job_id = queue.put({"k": n}, max_retries=2, queue="work")
        ids.append(job_id)
        record = queue.claim(job_id)
        assert record is not None
        if outcome == "done":
            record.ack({"result": n})
        elif outcome == "dead":
            record.nack(ValueError("broken"), permanent=True)
        else:
            record.nack(KeyError("later"), delay=600)
    queue.pause("mail", duration=3600, reason="provider down")
    queue.set_rate_limit("queue:work", "10/m")
    queue.set_circuit_breaker("name:t.a", threshold=3, recovery_timeout=30)
    return ids


def snapshot(queue: Queue, ids: list[int]) -> dict[int, Any]:
    return {job_id: queue.job(job_id) for job_id in ids}


@pytest.fixture
def stores(tmp_path: Path, pg_url: str) -> dict[str, dict[str, Any]]:
    return {
        "old": {"STORE": "lmdb", "DATA_DIR": str(tmp_path / "old"), "SHARDS": 3},
        "pg": {"STORE": "postgresql", "URL": pg_url},
        "back": {"STORE": "lmdb", "DATA_DIR": str(tmp_path / "back"), "SHARDS": 3},
        "narrow": {"STORE": "lmdb", "DATA_DIR": str(tmp_path / "narrow"), "SHARDS": 2},
    }


def test_lmdb_to_postgresql_and_back_keeps_every_job_by_its_id(
    stores: dict[str, dict[str, Any]], pg_url: str
) -> None:
    with Queue(stores["old"]["DATA_DIR"], shards=3) as old:
        ids = fill(old)
        ids += [old.put({"spread": n}) for n in range(12)]  # over the three shards
        before = snapshot(old, ids)
        assert {job_id & 0xFF for job_id in ids} == {0, 1, 2}
    with override_settings(QUEUE_MAX_TRANSFER=stores):
        dry = json.loads(call("--from", "old", "--to", "pg", "--dry-run", "--json"))
        assert dry["dry_run"] and dry["jobs"] == len(ids)
        assert dry["moved"] == {"pending": 16, "scheduled": 2, "running": 0, "done": 1, "failed": 1}
        assert (dry["unique_keys"], dry["unique_dropped"]) == (1, 0)
        with Queue(stores["old"]["DATA_DIR"]) as old:
            assert old.stats()["pending"] == 16  # a dry run writes nothing
        with pytest.raises(CommandError, match=r"jobs are in shards up to 2.*at least 3 shards"):
            call("--from", "old", "--to", "narrow")
        report = json.loads(call("--from", "old", "--to", "pg", "--json"))
        assert report["jobs"] == len(ids) and report["left_in_source"] == 0
        assert (report["pauses"], report["limits"], report["breakers"]) == (1, 1, 1)
        with Queue(pg_url) as pg:
            assert snapshot(pg, ids) == before
            assert pg.verify() == []
            assert [p.queue for p in pg.pauses()] == ["mail"]
            assert str(pg.rate_limits()["queue:work"]) == "10/m"
            assert pg.circuit_breakers()["name:t.a"]["threshold"] == 3
            assert pg.put("new") > max(ids)  # the target's own ids stay apart
            assert pg.put({"n": 6}, unique_key="order-7") == ids[4]  # the key moved with its job
        with Queue(stores["old"]["DATA_DIR"]) as old:
            stats = old.stats()
            assert stats["pending"] + stats["scheduled"] + stats["done"] + stats["failed"] == 0
        text = call("--from", "pg", "--to", "back")
        assert f"moved {len(ids) + 1} job(s)" in text
        with Queue(stores["back"]["DATA_DIR"]) as back:
            assert snapshot(back, ids) == before
            assert back.verify() == []
            assert back.put("newer") > max(ids)
            assert back.put({"n": 6}, unique_key="order-7") == ids[4]  # the same shard count: the same shard
            record = back.get(timeout=0)  # it runs: the first of the best priority, by its old id
            assert record.job_id == ids[0]
            record.ack()


def test_a_running_job_or_a_live_worker_on_the_source_refuses_the_move(
    stores: dict[str, dict[str, Any]],
) -> None:
    with Queue(stores["old"]["DATA_DIR"], shards=3) as old, override_settings(QUEUE_MAX_TRANSFER=stores):
        old.put("a")
        record = old.get(timeout=0)
        with pytest.raises(CommandError, match=r"1 job\(s\) are running on the source"):
            call("--from", "old", "--to", "back")
        record.ack()
        with pytest.raises(CommandError, match="no store is named 'nowhere'"):
            call("--from", "nowhere", "--to", "back")
        with pytest.raises(CommandError, match="same store"):
            call("--from", "old", "--to", "old")


def test_a_mistake_in_queue_max_transfer_is_the_system_check_e030(tmp_path: Path) -> None:
    from queue_max_django.conf.checks import transfer_problems

    with override_settings(QUEUE_MAX_TRANSFER={"old": {"STORE": "lmdb", "DATA_DIR": str(tmp_path)}}):
        assert transfer_problems(None) == []
    with override_settings(QUEUE_MAX_TRANSFER=["old"]):
        [problem] = transfer_problems(None)
        assert (problem.id, problem.msg) == (
            "queue_max_django.E030",
            "QUEUE_MAX_TRANSFER must be a dict, not list.",
        )
    with override_settings(QUEUE_MAX_TRANSFER={"default": {}, "pg": {"STORE": "postgres"}}):
        first, second = transfer_problems(None)
        assert first.msg.startswith("QUEUE_MAX_TRANSFER['default']: 'default' names QUEUE_MAX's store")
        assert second.id == "queue_max_django.E030"
        assert second.msg.startswith("QUEUE_MAX_TRANSFER['pg']['STORE'] must be 'lmdb' or 'postgresql'")
        assert second.msg.endswith("(queue_max_django.E016 of QUEUE_MAX)")


def test_default_names_the_store_of_queue_max(
    queue_max: Any, stores: dict[str, dict[str, Any]], pg_url: str
) -> None:
    from queue_max_django.conf import get_queue

    with queue_max(), override_settings(QUEUE_MAX_TRANSFER={"pg": stores["pg"]}):
        ids = get_queue().put_many(["a", "b"])
        report = json.loads(call("--from", "default", "--to", "pg", "--json"))
        assert (report["from"], report["to"], report["jobs"]) == ("default", "pg", 2)
        assert get_queue().stats()["pending"] == 0
        with Queue(pg_url) as pg:
            assert [pg.job(job_id).payload for job_id in ids] == ["a", "b"]  # type: ignore[union-attr]
        with pytest.raises(CommandError, match="no store is named 'old'"):
            call("--from", "old", "--to", "default")
