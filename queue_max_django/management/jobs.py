"""The jobs a command acts on: one job by id (or why it cannot be acted on), or the ids of every job in a
state, read before anything changes."""

from __future__ import annotations

from collections.abc import Callable

from django.core.management.base import CommandError

from ..engine import Job, Queue, State

PAGE = 1000  # jobs read per call of Queue.jobs()


def get_job(queue: Queue, job_id: int) -> Job:
    """The job ``job_id``; a ``CommandError`` saying it does not exist otherwise."""
    job = queue.job(job_id)
    if job is None:
        raise CommandError(no_job(job_id))
    return job


def no_job(job_id: int) -> str:
    return f"no job {job_id}: it never existed, or was purged or vacuumed."


def not_failed(queue: Queue, job_id: int, rule: str) -> str:
    """Why the engine did not act on ``job_id`` as a dead letter: it does not exist, or is in another
    state (then ``rule`` follows, such as "only dead letters can be retried")."""
    job = queue.job(job_id)
    if job is None:
        return no_job(job_id)
    if job.state is State.FAILED:  # it was not a moment ago: retried, and failed again, meanwhile
        return f"job {job_id} was not failed a moment ago, and is again now: try again."
    return f"job {job_id} is {job.state.value}, not failed: {rule}."


def job_ids(
    queue: Queue,
    state: State,
    *,
    queue_name: str | None = None,
    task: str | None = None,
    shard: int | None = None,
    keep: Callable[[Job], bool] | None = None,
) -> list[int]:
    """The ids of every job in ``state`` (of queue ``queue_name``, of ``task``, in ``shard``, for which
    ``keep(job)`` is true), read ``PAGE`` at a time, in the state's order."""
    ids: list[int] = []
    after = None
    while True:
        page = queue.jobs(state, queue=queue_name, name=task, shard=shard, after=after, limit=PAGE)
        ids += [job.job_id for job in page if keep is None or keep(job)]
        if len(page) < PAGE:
            return ids
        after = page[-1].job_id
