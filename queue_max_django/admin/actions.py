"""What the admin's buttons do to jobs: retry, cancel and delete, one job or many, with what happened counted;
and "enqueue again" of a done job (a new job with the same task, arguments and options). Cancelling a
waiting or scheduled job removes it (change permission); cancelling a running one marks it "cancel
requested", for its worker to stop (the ``cancel_job`` permission: models.py).

Each action runs one engine call per job (each its own LMDB transaction), and a job no longer in a state the
action fits is skipped and counted, never an error: other processes change the store between the page that
listed a job and the click. A dead letter quarantined as corrupted (``Job.corrupted``) is never retried
(the engine refuses it: nothing is left to run): it is skipped, and the message says so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..engine import CancelOutcome, Job, Queue, State

RETRY, CANCEL, DELETE, ENQUEUE, RUN = "retry", "cancel", "delete", "enqueue", "run"
CANCEL_RUNNING = "cancel_running"  # a running job: ask its worker to stop it

# The actions that fit the jobs of each state, and the permission each one needs.
STATE_ACTIONS: dict[State, tuple[str, ...]] = {
    State.PENDING: (CANCEL,),
    State.SCHEDULED: (RUN, CANCEL),
    State.RUNNING: (CANCEL_RUNNING,),
    State.DONE: (),
    State.FAILED: (RETRY, DELETE),
}
PERMISSION = {RETRY: "change", CANCEL: "change", DELETE: "delete", ENQUEUE: "change", RUN: "change",
              CANCEL_RUNNING: "cancel"}  # fmt: skip
VERBS = {
    RETRY: ("Retry", "Retried"),
    CANCEL: ("Cancel", "Cancelled"),
    DELETE: ("Delete", "Deleted"),
    RUN: ("Run now", "Moved to the waiting jobs, to run now:"),
    CANCEL_RUNNING: ("Cancel", "Cancel requested for"),
}
# What Django's admin log (``LogEntry``) says of a job an action changed (cancels: who cancelled what, when).
LOGGED = {
    CANCEL: "Cancelled (removed before it ran).",
    CANCEL_RUNNING: "Cancel requested (its worker stops it).",
}


def _operation(queue: Queue, action: str, by: str | None = None) -> Callable[[int], bool]:
    if action == RETRY:
        return queue.requeue
    if action == CANCEL:
        return queue.cancel
    if action == DELETE:
        return queue.delete
    if action == RUN:
        return lambda job_id: run_now(queue, job_id)
    if action == CANCEL_RUNNING:
        return lambda job_id: queue.request_cancel(job_id, by=by) is CancelOutcome.REQUESTED
    raise ValueError(f"unknown action {action!r}")


@dataclass(frozen=True)
class Outcome:
    """How many jobs an action changed, and how many it skipped: ``skipped`` (gone, or in another state by
    then) and ``corrupted`` (dead letters quarantined as corrupted, which a retry refuses)."""

    action: str
    done: int
    skipped: int
    corrupted: int = 0
    changed: tuple[int, ...] = ()  # the ids of the jobs it changed (for Django's admin log)

    def message(self) -> str:
        """The admin message: "Retried 12 jobs." plus the skipped ones, if any."""
        text = f"{VERBS[self.action][1]} {_jobs(self.done)}."
        if self.skipped:
            text += f" Skipped {_jobs(self.skipped)} that no longer fit (gone, or in another state by now)."
        if self.corrupted:
            text += (
                f" Skipped {_jobs(self.corrupted)} quarantined as corrupted (error type Corrupted): their "
                f"data did not decode, so nothing is left to run; read and delete them."
            )
        return text


def apply(
    queue: Queue, action: str, job_ids: Iterable[int], *, state: State, by: str | None = None
) -> Outcome:
    """Run ``action`` on each job that is still in ``state`` (the list it was picked from). -> how many it
    changed and how many it skipped. ``by``: who asks, noted with a cancel of a running job (its metadata
    then says who cancelled it and when)."""
    operation = _operation(queue, action, by)
    done = skipped = corrupted = 0
    changed: list[int] = []
    for job_id in job_ids:
        job = queue.job(job_id)
        if job is not None and job.state is state and operation(job_id):
            done += 1
            changed.append(job_id)
        elif action == RETRY and job is not None and job.corrupted:
            corrupted += 1
        else:
            skipped += 1
    return Outcome(action, done, skipped, corrupted, tuple(changed))


def purge_failed(queue: Queue, *, failed_before: float, now: float) -> Outcome:
    """Delete every dead letter that failed at or before ``failed_before`` (unix seconds, ``now`` being the
    time on the queue's clock): the engine's ``purge``, for "delete all matching" with no filter."""
    return Outcome(DELETE, queue.purge(State.FAILED, older_than=max(0.0, now - failed_before)), 0)


def _jobs(count: int) -> str:
    return f"{count:,} job" if count == 1 else f"{count:,} jobs"


def enqueue_again(queue: Queue, job: Job) -> int:
    """A new job, waiting now, with ``job``'s payload, task name, queue, priority, retries allowed, timeout
    and partition key (a done job run once more: django-rq's and django-q2's "requeue"). -> its id. The
    engine's ``InvalidJob`` when its queue is no longer allowed (nothing is written then)."""
    return queue.put(
        job.payload,
        name=job.name,
        queue=job.queue,
        priority=job.priority,
        max_retries=job.max_retries,
        timeout=job.timeout,
        partition_key=job.partition_key,
    )


def run_now(queue: Queue, job_id: int) -> bool:
    """A scheduled job waits from now on instead of its due time (django-rq's and django-q2's "enqueue now"):
    the engine's ``claim`` then ``release``, which gives a job back to pending without counting an attempt,
    and clears its due time. -> False if it was not scheduled (or waiting) any more. Two transactions: should
    this process die between them, the job's lease runs out and it counts one failed attempt ("lease
    expired"), as for any holder that dies."""
    record = queue.claim(job_id)
    if record is None:
        return False
    record.release()
    return True
