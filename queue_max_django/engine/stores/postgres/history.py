"""The PostgreSQL store's throughput history: the jobs ever done and ever dead-lettered, from the counter
rows (the done and failed counts plus ``DONE_LEFT`` and ``FAILED_LEFT``, which the removing operations of
``upkeep.py`` count), the jobs ever put into each queue (its ``TOTAL`` rows), and the per-minute samples in
``qm_samples`` (``schema.py``), as ``stores/base.py`` states them (``Store.save_sample``)."""

from __future__ import annotations

from ..types import Sample
from .schema import CANCELLED, CANCELLED_LEFT, DONE, DONE_LEFT, FAILED, FAILED_LEFT, TOTAL
from .sql import Statements

_TOTALS = f"""
SELECT coalesce(sum(n) FILTER (WHERE state IN ({DONE}, {DONE_LEFT})), 0)::bigint,
       coalesce(sum(n) FILTER (WHERE state IN ({FAILED}, {FAILED_LEFT})), 0)::bigint
FROM qm_counts WHERE state IN ({DONE}, {DONE_LEFT}, {FAILED}, {FAILED_LEFT})
"""
_ENQUEUED = f"SELECT queue, sum(n)::bigint FROM qm_counts WHERE state = {TOTAL} GROUP BY queue ORDER BY queue"
_SAVE = """
WITH ins AS (INSERT INTO qm_samples (minute, done, failed, lag) VALUES (%s, %s, %s, %s)
             ON CONFLICT (minute) DO NOTHING RETURNING minute),
old AS (DELETE FROM qm_samples WHERE minute < %s AND EXISTS (SELECT 1 FROM ins))
SELECT count(*) FROM ins
"""
_SAMPLES = "SELECT minute, done, failed, lag FROM qm_samples WHERE minute >= %s ORDER BY minute"


def finished_totals(store: Statements) -> tuple[int, int]:
    done, failed = store.one(_TOTALS, None)
    return int(done), int(failed)


_CANCELS = f"""
SELECT coalesce(sum(n) FILTER (WHERE state = {CANCELLED}), 0)::bigint, coalesce(sum(n), 0)::bigint
FROM qm_counts WHERE state IN ({CANCELLED}, {CANCELLED_LEFT})
"""


def cancel_counts(store: Statements) -> tuple[int, int]:
    now, ever = store.one(_CANCELS, None)
    return int(now), int(ever)


def enqueued_totals(store: Statements) -> dict[str, int]:
    return {queue: int(count) for queue, count in store.rows(_ENQUEUED, None) if count}


def save_sample(store: Statements, sample: Sample, keep: int) -> bool:
    params = (sample.minute, sample.done, sample.failed, float(sample.lag), sample.minute - keep)
    return bool(store.one(_SAVE, params)[0])


def samples(store: Statements, since: int) -> list[Sample]:
    return [Sample(int(m), int(d), int(f), float(lag)) for m, d, f, lag in store.rows(_SAMPLES, (since,))]
