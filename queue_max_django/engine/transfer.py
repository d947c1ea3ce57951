"""Moving a store's jobs, pauses, kept schedules, rate limits and breakers to another store (``manage.py
queue_transfer``), so that an application can go from the embedded LMDB store to PostgreSQL (or back)
without losing a job.

The move is made of ``Store.transfer``'s operations (``stores/contract/transfer.py``), batch after batch:

1. read a batch of the source's jobs that are not running (``export``, by id);
2. write it to the target in one transaction per target shard that also marks each id as moved
   (``insert``): a batch is in the target whole, or not at all;
3. remove it from the source (``remove``), then go on after its last id.

Killed at any instant, the move leaves each job in the source, or in both (between 2 and 3), never in
neither. Run again, it reads the same batch, the target skips the ids it marked (the copy it holds may have
run, and even been vacuumed, since: it is never written again), and the source's copy is removed. Once a
whole pass finds nothing left to move, the marks are forgotten (``forget_marks``).

What the move needs of the application: no worker takes jobs from the source while it runs (a job in both
stores between 2 and 3 would run twice). ``transfer`` refuses to start while a job of the source is
running or a worker is registered there (``Refused``), and producers may go on putting jobs into the
target all along (the ids it takes in stay apart from its own: ``[sc_transfer_ids]``), or into the source
(a later pass, or a rerun, moves them).

Rate limits and breakers move as their definitions (a limit starts with a full bucket in the target, a
breaker closed: ``FlowOps.set_limit``/``set_breaker``); a pause moves with the time it has left; a kept
schedule (``ScheduleOps``) as it is kept, its record's bytes written under its name (a rerun writes it
again, over a change made in the target meanwhile, as it applies the pauses again). A job's
unique key moves with it (its entry, in the insert's transaction), unless the target already has an entry
for that key, or is a store of several shards where the key's shard is not the job's (``_unique_fits``:
the report counts them). Running workflows are refused
(their waiting nodes are not jobs yet); the jobs of finished ones move, their workflow records do not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import QueueError
from .job import SHARD_BITS, STATES
from .putting import shard_of_key
from .stores.base import Store
from .stores.contract.transfer import MovedJob, UniqueEntry

if TYPE_CHECKING:
    from .queue import Queue

BATCH = 500  # jobs per batch: one read of the source, one write per target shard, one removal
_SHARD_MASK = (1 << SHARD_BITS) - 1


class Refused(QueueError):
    """The move cannot start (nothing was written): why, and what to do."""


@dataclass(slots=True)
class Report:
    """What a move did (``--json``), or would do (``dry_run``)."""

    dry_run: bool
    moved: dict[str, int] = field(default_factory=lambda: {state.value: 0 for state in STATES})
    already_there: int = 0  # jobs the target took in an earlier run (marked), removed from the source now
    left_in_source: int = 0  # jobs still in the source at the end (running, or records that do not decode)
    limits: int = 0
    breakers: int = 0
    pauses: int = 0
    schedules: int = 0
    unique_keys: int = 0  # moved jobs that held a unique key: its entry moved with them
    unique_dropped: int = 0  # of those, keys the target cannot hold beside their job (below): not moved
    passes: int = 0
    marks_forgotten: int = 0

    @property
    def jobs(self) -> int:
        return sum(self.moved.values())

    def as_dict(self) -> dict[str, object]:
        return {
            "dry_run": self.dry_run, "jobs": self.jobs, "moved": dict(self.moved),
            "already_there": self.already_there, "left_in_source": self.left_in_source, "limits": self.limits,
            "breakers": self.breakers, "pauses": self.pauses, "schedules": self.schedules,
            "unique_keys": self.unique_keys, "unique_dropped": self.unique_dropped,
            "passes": self.passes, "marks_forgotten": self.marks_forgotten,
        }  # fmt: skip


def check(source: Store, target: Store) -> None:
    """Why the move cannot start, as ``Refused`` (nothing written), or nothing."""
    if source.kind == target.kind and source.path == target.path:
        raise Refused(f"the source and the target are the same store ({source.kind} at {source.path})")
    running = source.counts()["running"]
    if running:
        raise Refused(
            f"{running} job(s) are running on the source ({source.kind} at {source.path}): their workers "
            f"hold leases. Stop the source's workers (they finish their jobs on SIGTERM) and run the move "
            f"again once none runs (`manage.py queue_stats`: running 0)"
        )
    workers = source.locks.workers()
    if workers:
        names = ", ".join(f"{w.worker_id} (pid {w.pid} on {w.host})" for w in workers[:5])
        raise Refused(
            f"{len(workers)} worker(s) are registered on the source and reported within their stale time: "
            f"{names}. Stop them before the move: a worker could take a job that is also in the target"
        )
    flowing = source.workflows.counts().get("running", 0)
    if flowing:
        raise Refused(
            f"{flowing} workflow(s) of the source are running: their waiting steps are not jobs yet and "
            f"cannot be moved. Let them finish (or cancel them) before the move"
        )


def transfer(
    source: Store,
    target: Store,
    *,
    dry_run: bool = False,
    batch: int = BATCH,
) -> Report:
    """Move everything from ``source`` to ``target`` (see the module docstring), or with ``dry_run`` count
    what would move and write nothing. ``Refused`` before anything is written when it cannot start."""
    check(source, target)
    report = Report(dry_run)
    _check_ids(source, target, batch)
    flow = source.control.state()
    report.limits, report.breakers = len(flow.limits), len(flow.breakers)
    _version, pauses = source.pauses.pauses()
    report.pauses = len(pauses)
    schedules = source.schedules.all()
    report.schedules = len(schedules)
    if dry_run:
        for shard in range(source.shards):
            entries = _entries(source, shard)
            after: int | None = None
            while jobs := source.transfer.export(shard, after, batch):
                _attach_unique(jobs, entries)
                _unique_fits(target, jobs, report)
                for job in jobs:
                    report.moved[job.state.value] += 1
                after = jobs[-1].job_id
        report.left_in_source = source.counts()["running"]
        return report
    # Pauses first, so that the jobs of a paused queue do not start in the target as they arrive. (A rerun
    # applies them again: a pause resumed in the target meanwhile is back, as the how-to says.)
    for pause in pauses:
        left = None if pause.until is None else max(pause.until - source.clock(), 0.001)
        target.pauses.pause([(pause.queue, pause.task)], left, pause.reason, pause.by)
    for key, limit in flow.limits.items():
        target.control.set_limit(key, limit.rate)
    for key, entry in flow.breakers.items():
        target.control.set_breaker(key, entry.policy)
    for name, raw in schedules:  # kept schedules as kept (their records are the same bytes on every store)
        target.schedules.change(name, lambda _kept, raw=raw: raw)  # type: ignore[misc]
    while True:
        report.passes += 1
        moved_now = _one_pass(source, target, batch, report)
        if not moved_now:
            break
    report.left_in_source = sum(source.counts()[state.value] for state in STATES)
    report.marks_forgotten = target.transfer.forget_marks()
    return report


def _one_pass(source: Store, target: Store, batch: int, report: Report) -> int:
    """Move every job the source exports, shard after shard. -> how many it found."""
    found = 0
    for shard in range(source.shards):
        entries = _entries(source, shard)
        after: int | None = None
        while jobs := source.transfer.export(shard, after, batch):
            found += len(jobs)
            _attach_unique(jobs, entries)
            dropped = _unique_fits(target, jobs, None)
            written: set[int] = set()
            for group in _by_target_shard(target, jobs).values():
                written.update(target.transfer.insert(group))
            for job in jobs:
                if job.job_id in written:
                    report.moved[job.state.value] += 1
                    report.unique_keys += job.unique is not None or job.job_id in dropped
                    report.unique_dropped += job.job_id in dropped
                else:
                    report.already_there += 1
            source.transfer.remove(shard, [job.job_id for job in jobs])
            after = jobs[-1].job_id
    return found


def _check_ids(source: Store, target: Store, batch: int) -> None:
    """A target of several shards holds a job in the shard its id names: refuse a move that needs a shard
    the target does not have (an LMDB store of more shards than the target's)."""
    if target.shards == 1:
        return
    top = -1
    for shard in range(source.shards):
        after: int | None = None
        while jobs := source.transfer.export(shard, after, batch):
            top = max(top, *(job.job_id & _SHARD_MASK for job in jobs))
            after = jobs[-1].job_id
    if top >= target.shards:
        raise Refused(
            f"the source's jobs are in shards up to {top}, and the target has {target.shards} shard(s): "
            f"a job keeps its id, whose low byte is its shard. Give the target at least {top + 1} shards"
        )


def _by_target_shard(target: Store, jobs: list[MovedJob]) -> dict[int, list[MovedJob]]:
    groups: dict[int, list[MovedJob]] = {}
    one = target.shards == 1
    for job in jobs:
        groups.setdefault(0 if one else job.job_id & _SHARD_MASK, []).append(job)
    return groups


def _entries(source: Store, shard: int) -> dict[int, UniqueEntry]:
    """The unique entries of a source shard, by the id of the job each names (read once a pass: a key
    taken in the source after that moves in the next pass, or the next run)."""
    return dict(source.transfer.unique_entries(shard))


def _attach_unique(jobs: list[MovedJob], entries: dict[int, UniqueEntry]) -> None:
    for job in jobs:
        job.unique = entries.get(job.job_id)


def _unique_fits(target: Store, jobs: list[MovedJob], report: Report | None) -> set[int]:
    """Drop the unique entries that a target of several shards cannot hold beside their jobs: a put with a
    key goes to the key's shard (``putting.shard_of_key``), where the check must meet its holder, and a
    moved job stays in the shard its id names. -> the ids whose entries were dropped (counted in
    ``report`` when given: a dry run)."""
    dropped: set[int] = set()
    for job in jobs:
        if job.unique is None:
            continue
        if report is not None:
            report.unique_keys += 1
        shards = target.shards
        if shards > 1 and shard_of_key(job.unique.key.decode(), shards) != job.job_id & _SHARD_MASK:
            job.unique = None
            dropped.add(job.job_id)
            if report is not None:
                report.unique_dropped += 1
    return dropped


def transfer_queues(source: Queue, target: Queue, **options: Any) -> Report:
    """``transfer`` between the stores of two ``Queue``s (the Django layer opens them from the settings)."""
    return transfer(source._store, target._store, **options)
