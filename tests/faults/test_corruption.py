"""A job whose bytes on disk are broken (garbage, torn, another shape; or a payload that does not decode):
``verify()`` (and so ``queue_check``) names it; the first claim that meets it moves it to the dead letters
with the error type "Corrupted" and an error that starts with "corrupted:", and raises ``QueueCorrupted``
once; every other job is still served; afterwards the store is consistent again, on disk.

Run on each store kind: the damage is done by the store's probe (``break_record`` one of the ways of
tests/faults/corrupt.py's ``RECORD_DAMAGE``, ``break_payload``, ``break_result``), which skips a kind of
damage its store cannot suffer.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from queue_max_django.engine import Queue, QueueCorrupted, QueueEmpty, State
from queue_max_django.engine.stores.lmdb import layout
from tests.engine.probes import StoreProbe
from tests.faults.corrupt import DAMAGE, GARBAGE, RECORD_DAMAGE

MakeQueue = Callable[..., Queue]
Probe = Callable[[Queue], StoreProbe]
PAYLOAD_SIZES = {"inline": 10, "large": layout.INLINE_PAYLOAD_MAX * 4}  # in the record / stored apart (LMDB)


def damage(probe: StoreProbe, job_id: int, how: str) -> None:
    """Break the job one of the ways ``DAMAGE`` names, through the store's probe."""
    if how in RECORD_DAMAGE:
        probe.break_record(job_id, how)
    else:
        assert how == "garbage-payload", how
        probe.break_payload(job_id)


def broken_store(make_queue: MakeQueue, probe: Probe, how: str, size: int) -> tuple[int, list[int]]:
    """A one-shard store with one damaged job (priority 5: the first a claim meets) among three good
    ones. -> (the damaged job's id, the good ones' ids)."""
    with make_queue(shards=1) as q:
        bad = q.put({"args": ["b" * size], "kwargs": {}}, priority=5)
        good = [q.put({"args": [n], "kwargs": {}}) for n in range(3)]
        damage(probe(q), bad, how)
    return bad, good


def assert_quarantined(q: Queue, bad: int) -> None:
    job = q.job(bad)
    assert job is not None and job.state is State.FAILED
    assert job.error_type == "Corrupted"
    assert job.error is not None and job.error.startswith("corrupted:") and str(bad) in job.error
    assert [dead.job_id for dead in q.dead_letters()] == [bad]


@pytest.mark.inv_1
@pytest.mark.parametrize("size", PAYLOAD_SIZES.values(), ids=PAYLOAD_SIZES.keys())
@pytest.mark.parametrize("how", DAMAGE)
def test_a_corrupted_job_is_quarantined_and_the_others_are_served(
    make_queue: MakeQueue, probe: Probe, how: str, size: int
) -> None:
    bad, good = broken_store(make_queue, probe, how, size)
    with make_queue() as q:
        problems = q.verify()
        assert problems and all(str(bad) in problem for problem in problems), problems

        with pytest.raises(QueueCorrupted, match=str(bad)) as caught:
            q.get_many(10, timeout=0)
        assert "dead letters" in str(caught.value)
        assert_quarantined(q, bad)

        served = []
        while True:
            try:
                record = q.get(0)
            except QueueEmpty:
                break
            served.append(record.job_id)
            record.ack(record.payload["args"][0])
        assert served == good
        assert q.verify() == []

    with make_queue() as q:  # on disk, after a restart
        assert q.verify() == []
        assert_quarantined(q, bad)
        stats = q.stats()
        assert (stats["done"], stats["failed"], stats["pending"], stats["total"]) == (3, 1, 0, 4)
        assert [q.job(job_id).result for job_id in good] == [0, 1, 2]


@pytest.mark.parametrize("size", PAYLOAD_SIZES.values(), ids=PAYLOAD_SIZES.keys())
def test_a_payload_that_does_not_decode_is_kept_as_bytes_in_the_dead_letter(
    make_queue: MakeQueue, probe: Probe, size: int
) -> None:
    """Reading the job before the claim gives a snapshot that says what is damaged and keeps the raw bytes
    (a listing or the admin never fails on it); after the quarantine its payload reads back as the bytes
    that were on disk, for whoever investigates."""
    bad, _good = broken_store(make_queue, probe, "garbage-payload", size)
    with make_queue() as q:
        before = q.job(bad)
        assert before is not None and before.payload == GARBAGE
        assert before.damage is not None and "payload cannot be decoded" in before.damage
        assert bad in [job.job_id for job in q.jobs(State.PENDING, limit=100)]
        with pytest.raises(QueueCorrupted):
            q.get(0)
        job = q.job(bad)
        assert job is not None and job.payload == GARBAGE
        assert "payload cannot be decoded" in (job.error or "")
        assert q.verify() == []


@pytest.mark.parametrize("size", PAYLOAD_SIZES.values(), ids=PAYLOAD_SIZES.keys())
def test_claiming_a_job_with_a_payload_that_does_not_decode_by_id_quarantines_it(
    make_queue: MakeQueue, probe: Probe, size: int
) -> None:
    """``claim(job_id)`` (the immediate mode's way in) meets the same damage: no record, the job is a dead
    letter, the store is consistent."""
    bad, good = broken_store(make_queue, probe, "garbage-payload", size)
    with make_queue() as q:
        assert q.claim(bad) is None
        assert_quarantined(q, bad)
        record = q.claim(good[0])
        assert record is not None and record.payload == {"args": [0], "kwargs": {}}
        record.ack()
        assert q.verify() == []


def test_a_result_that_does_not_decode_is_a_clear_error_and_verify_names_it(
    make_queue: MakeQueue, probe: Probe
) -> None:
    with make_queue(shards=1) as q:
        job_id = q.put("x")
        q.get(0).ack({"fine": True})
        probe(q).break_result(job_id)
        job = q.job(job_id)
        assert job is not None and job.result == GARBAGE and "result" in (job.damage or "")
        problems = q.verify()
        assert len(problems) == 1 and str(job_id) in problems[0] and "result" in problems[0]
