"""A damaged page of an LMDB shard (LMDB keeps no checksums): a flipped bit in an index key leaves the key
out of order in its page, where a cursor still meets it but a lookup by key misses it. Claims, recovery,
promotion and the reads walk such an index; each must end (with the jobs served, an error or a quarantine)
instead of meeting the same entry again for ever inside a write transaction that holds the shard's lock
(every other process would then wait on that shard). The damage is made by hand, exactly: one byte of one
ready key, in the shard's file. The claims run in a child process, under a time bound.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import lmdb
import pytest

from queue_max_django.engine import State
from queue_max_django.engine.stores.lmdb.keys import ready_key
from tests.engine.conftest import open_queue

pytestmark = [pytest.mark.lmdb, pytest.mark.slow]

BOUND = 20.0  # seconds: a claim of a few jobs takes milliseconds; a spin never ends
JOBS = 4

# Claims every job it can (``QueueCorrupted`` is the answer for a quarantined one), acks each, then runs the
# other walks over the shard's indexes; prints what it claimed and what verify() says.
CHILD = """
import json, sys
from queue_max_django.engine import Queue, QueueCorrupted, QueueEmpty
claimed, errors = [], 0
with Queue(sys.argv[1], do_recover=False, do_vacuum=False) as q:
    for _ in range(50):
        try:
            record = q.get(0)
        except QueueEmpty:
            break
        except QueueCorrupted:
            errors += 1
            continue
        claimed.append(record.job_id)
        record.ack()
    q.recover(); q.promote(); q.stats(); q.jobs("pending")
    print(json.dumps({"claimed": claimed, "errors": errors, "problems": q.verify()}))
"""

# The same by batches (``get_many``, as a worker claims): one claim walks the ready index from key to key.
CHILD_MANY = """
import json, sys
from queue_max_django.engine import Queue, QueueCorrupted, QueueEmpty
claimed, batches, errors = [], [], 0
with Queue(sys.argv[1], do_recover=False, do_vacuum=False) as q:
    for _ in range(50):
        try:
            records = q.get_many(10, 0, queues=sys.argv[2:] or None)
        except QueueEmpty:
            break
        except QueueCorrupted:
            errors += 1
            continue
        batches.append([record.job_id for record in records])
        claimed.extend(batches[-1])
        q.ack_many([(record, None) for record in records])
    print(json.dumps({"claimed": claimed, "batches": batches, "errors": errors, "problems": q.verify()}))
"""


def damaged_store(path: Path, victim: int) -> tuple[list[int], str]:
    """A one-shard store with ``JOBS`` pending jobs (put in one transaction, so the ready index's page is
    written once), then one bit of job ``victim``'s ready key flipped in the file: the top bit of its ready
    time, so that it sorts after every other key but stays where it was in the page. -> (the ids, the
    damaged key)."""
    with open_queue(path, shards=1) as q:
        ids = q.put_many([{"args": [n], "kwargs": {}} for n in range(JOBS)])
        job = q.job(ids[victim])
        assert job is not None
    key = ready_key(b"default", 0, int(job.enqueued_at * 1_000_000), ids[victim])
    data = path / "shard-000" / "data.mdb"
    raw = bytearray(data.read_bytes())
    assert raw.count(key) == 1, "the ready key is in the file once, on its live page"
    at = raw.index(key) + len(b"default\x00") + 2  # the ready time's first byte
    raw[at] ^= 0x80
    data.write_bytes(bytes(raw))
    return ids, bytes(raw[at - len(b"default\x00") - 2 : at + 16]).hex()


def claim_in_child(path: Path, child: str = CHILD, *queues: str) -> dict[str, object]:
    try:
        done = subprocess.run(
            [sys.executable, "-c", child, str(path), *queues], capture_output=True, text=True, timeout=BOUND
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the claims did not end within {BOUND} s: a walk spins on the damaged index")
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


# the last key's flip would leave it in order: the others' leave one key out of order
@pytest.mark.parametrize("victim", range(JOBS - 1), ids=[f"key{n}" for n in range(JOBS - 1)])
def test_a_key_out_of_order_in_the_ready_index_never_makes_a_claim_spin(
    store_path: Path, victim: int
) -> None:
    ids, damaged = damaged_store(store_path, victim)
    with open_queue(store_path) as q:
        problems = q.verify()
    assert any("pending index holds keys out of order" in problem for problem in problems), problems
    result = claim_in_child(store_path)
    claimed = result["claimed"]
    assert isinstance(claimed, list)
    assert set(claimed) <= set(ids) and len(claimed) == len(set(claimed)), claimed
    # Every job but the one whose key is damaged was served; that one was served too, or quarantined.
    assert set(ids) - {ids[victim]} <= set(claimed), result
    with open_queue(store_path) as q:
        states = {job_id: q.job(job_id).state for job_id in ids}  # type: ignore[union-attr]
        assert all(states[job_id] is State.DONE for job_id in claimed), states
        assert states[ids[victim]] in (State.DONE, State.FAILED), states
        assert q.stats()["pending"] == 0 and q.stats()["running"] == 0
        # the damaged entry is gone: nothing is left in the ready index
        assert q.jobs(State.PENDING) == []
        assert q.verify() == []
    assert result["problems"] == [], damaged


@pytest.mark.parametrize("victim", range(JOBS - 1), ids=[f"key{n}" for n in range(JOBS - 1)])
def test_a_key_out_of_order_never_makes_a_batch_claim_spin_or_skip(store_path: Path, victim: int) -> None:
    """A claim of several jobs steps from the key it took to the next one under its cursor; after the
    damaged key that next key sorts before it, and the claim seeks its queue's first key instead: the
    first claim takes every job (the damaged one too: the cursor stands on it), each once."""
    ids, damaged = damaged_store(store_path, victim)
    result = claim_in_child(store_path, CHILD_MANY)
    assert result["batches"] == [ids] and result["errors"] == 0, (result, damaged)
    with open_queue(store_path) as q:
        assert all(q.job(job_id).state is State.DONE for job_id in ids)  # type: ignore[union-attr]
        assert q.stats()["pending"] == 0 and q.stats()["running"] == 0
        assert q.jobs(State.PENDING) == []
        assert q.verify() == []
    assert result["problems"] == [], damaged


def test_a_record_key_out_of_order_costs_a_batch_claim_that_job_only(store_path: Path) -> None:
    """A claim looks each job's record up with one cursor, in its leaf page when the id is within the
    page's first and last keys. A flipped bit makes one page's last key the largest of all: every later
    id then seems to belong to that page, where it is not. Such a miss is looked up from the root (where
    the branch pages lead to the right leaf), so the claims serve every job but the damaged one (its record
    cannot be found: its entry is dropped as stray) instead of dropping the next page's jobs. The damaged
    record is of queue "b" and the claims take queue "a", whose jobs alternate with b's: the lookup after
    the last a job of the damaged page is the first a job of the next page, with the cursor on the first."""
    with open_queue(store_path, shards=1) as q:
        ids = [q.put({"args": [n], "kwargs": {}}, queue="ab"[n % 2]) for n in range(200)]
    shard = store_path / "shard-000"
    compact = store_path / "compact"  # a compact copy: each record is in the file once, on its live page
    compact.mkdir()
    env = lmdb.open(str(shard), subdir=True, max_dbs=16, readonly=True, lock=False)
    env.copy(str(compact), compact=True)
    env.close()
    shutil.move(compact / "data.mdb", shard / "data.mdb")
    raw = bytearray((shard / "data.mdb").read_bytes())
    pages: dict[int, list[int]] = {}
    for job_id in ids:  # a jobs node: the id's key, then its record (a msgpack array of 25 fields)
        node = struct.pack(">Q", job_id) + b"\xdc\x00\x19"
        assert raw.count(node) == 1
        pages.setdefault(raw.index(node) // 4096, []).append(job_id)
    assert len(pages) > 2, pages
    # the last record of a leaf page before the last one: a b job
    victim = next(page[-1] for page in sorted(pages.values())[:-1] if ids.index(page[-1]) % 2 == 1)
    raw[raw.index(struct.pack(">Q", victim) + b"\xdc\x00\x19")] ^= 0x80
    (shard / "data.mdb").write_bytes(bytes(raw))
    result = claim_in_child(store_path, CHILD_MANY, "a")
    assert sorted(result["claimed"]) == sorted(ids[0::2]), result  # type: ignore[arg-type]
    result = claim_in_child(store_path, CHILD_MANY, "b")
    assert sorted(result["claimed"]) == sorted(set(ids[1::2]) - {victim}), result  # type: ignore[arg-type]
    with open_queue(store_path) as q:
        assert all(q.job(job_id).state is State.DONE for job_id in ids if job_id != victim)  # type: ignore[union-attr]
