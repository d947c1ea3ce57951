"""The values that cross the line between the ``Queue`` and its store: plain Python, no store's bytes,
cursors or key layouts. What a store writes is its own affair (the LMDB store: ``lmdb/``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import InvalidJob
from .contract.uniqueness import UniqueRule

if TYPE_CHECKING:
    from ..job import State
    from ..jobspec import JobSpec


UNIQUE_KEY_MIN_TTL = 86_400.0  # seconds a unique key is kept at least, whatever result_ttl (periodic ticks)


@dataclass(slots=True)
class NewJobs:
    """Jobs ready to be written: payloads already packed and size-checked by the Queue, sharing one set of
    validated options."""

    payloads: Sequence[bytes]
    spec: JobSpec
    unique: UniqueRule | None = None  # one payload only: the key and its rule (contract/uniqueness.py)
    unique_hit: bool = False  # set by the store's enqueue: the key was held, the id is its holder's
    replaced: bool = False  # set with ``unique_hit`` when the holder took this batch's payload (replace)


@dataclass(slots=True)
class Claimed:
    """A job a claim took, as the claim left it: running, held by ``token`` until ``lease_until``. The
    ``Record`` handed to the consumer is built from it. (Not frozen: one is made on every claim, and a
    frozen dataclass's ``__init__`` costs an ``object.__setattr__`` per field.)"""

    job_id: int
    token: bytes
    payload: Any  # decoded inside the claim's transaction: a payload that does not decode is quarantined
    retries: int
    max_retries: int
    attempts: int
    enqueued_at: float  # unix seconds
    priority: int
    queue: str
    name: str | None
    timeout: float | None
    lease_until: float  # unix seconds
    worker_ids: tuple[str, ...]  # who claimed it, one per attempt, the last ten
    alone: bool = False  # a job whose lease once expired: its claim took no other job with it
    metadata: dict[str, Any] = field(default_factory=dict)  # the job's, decoded (engine/metadata.py)


@dataclass(slots=True)
class ClaimOutcome:
    """What one claim of one shard did: the jobs it took (possibly none), the priority of that shard's next
    claimable job after them (None: there is none; with nothing claimed and a priority, the claim was
    outranked by ``min_priority``), its earliest ETA, whether it had to wait for another writer, and whether
    limited jobs may wait in the shard (``contract/concurrency.py``; True is always allowed). Not frozen,
    as ``Claimed`` is not: every claim makes one, and a frozen dataclass's ``__init__`` sets each field
    through ``object.__setattr__`` (0.6 against 0.23 µs)."""

    claimed: list[Claimed]
    head_priority: int | None
    next_eta: float | None
    contended: bool
    limited: bool = False


@dataclass(frozen=True, slots=True)
class Head:
    """What a read of one shard saw: the best claimable job's priority, and the earliest ETA."""

    priority: int | None
    next_eta: float | None
    limited: bool = False  # limited jobs of the read's queues wait there (stores/contract/concurrency.py)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A pending job a flow-controlled consumer may take. ``order`` (minus the priority, the ready time in
    µs, the job id) compares across shards: the smallest is claimed first."""

    order: tuple[int, int, int]
    job_id: int
    shard: int
    queue: str
    name: str | None


@dataclass(frozen=True, slots=True)
class Recovered:
    """A job that recovery took back from a holder whose lease expired, and where it went. ``charged``:
    the expiry counted as a failed attempt (False for a job claimed in a batch: it goes back uncharged, to
    be claimed alone next time). ``attempt``: the attempt that was lost (1 for the first), of
    ``attempts_allowed`` (``max_retries + 1``); ``worker``: the id of the worker that held it, as its claim
    recorded it (the last of ``Job.worker_ids``; None if the claim named none)."""

    job_id: int
    queue: str
    name: str | None
    state: State
    charged: bool = True
    attempt: int = 0
    attempts_allowed: int = 0
    worker: str | None = None


@dataclass(frozen=True, slots=True)
class StoreInfo:
    """What a store is, for display: its kind ("lmdb"), where it is (a path; never a password), and its
    number of shards."""

    kind: str
    location: str
    shards: int


class CorruptedJobQuarantined(Exception):
    """A claim met a job whose data is broken; the store moved it to the dead letters, and the claim must be
    retried. Walks collect these to log them once their transaction has committed (``deleted``: the job was
    being deleted, so it is gone rather than a dead letter)."""

    def __init__(self, job_id: int, reason: str) -> None:
        super().__init__(job_id, reason)
        self.job_id = job_id
        self.reason = reason
        self.deleted = False


# What the processes of one store tell each other (a store keeps it beside the limits and breakers): who
# holds a named lock, and the workers' reports. Lock names, owners and worker ids are keys: ``id_bytes``.


@dataclass(frozen=True, slots=True)
class LockHolder:
    owner: str
    expires_at: float  # unix seconds
    since: float  # when this owner took it (renewals keep it)


# The owner of the lease that stands in for a lock record that does not decode (lmdb/coordination.py says
# why): no real owner is empty (``id_bytes``), so nobody holds it, renews it or releases it.
UNKNOWN_HOLDER = ""


def lock_damage(name: str, ttl: float) -> str:
    """The log line of a lock whose record does not decode, met by ``acquire_lock`` (both stores)."""
    return (
        f"lock {name!r}: its record does not decode; it counts as held by nobody known for {ttl:g} s "
        f"(the ttl asked for), then it is free"
    )


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """One worker process as it last reported itself. Times are unix seconds."""

    worker_id: str
    pid: int
    host: str
    started_at: float
    last_heartbeat: float
    stale_after: float  # seconds without a report after which the worker counts as dead
    queues: tuple[str, ...] | None  # None: every queue
    threads: int
    current_jobs: tuple[int, ...]
    processed: int
    failed: int

    def alive(self, now: float) -> bool:
        return now - self.last_heartbeat <= self.stale_after


@dataclass(frozen=True, slots=True)
class Sample:
    """One minute's reading of the store-wide counters (``Store.save_sample``), from which the throughput
    chart draws the differences between consecutive minutes: jobs ever done and ever dead-lettered (both
    only grow; a fall means a store that was replaced or emptied), and the age of the oldest waiting job."""

    minute: int  # unix minutes: int(unix seconds // 60)
    done: int  # jobs that ever finished successfully (``Store.finished_totals``)
    failed: int  # jobs that ever became dead letters
    lag: float  # seconds the oldest waiting job had been ready to claim (0: nothing waiting)


MAX_ID = 200
MAX_KEY_BYTES = 511  # LMDB's largest key


def id_bytes(what: str, value: Any, max_chars: int = MAX_ID) -> bytes:
    """``value`` as a store key: a str of 1 to ``max_chars`` characters whose UTF-8 fits an LMDB key."""
    if isinstance(value, str) and 0 < len(value) <= max_chars:
        try:
            encoded = value.encode()
        except UnicodeEncodeError:
            raise InvalidJob(f"{what} must be valid Unicode (no lone surrogates), not {value!r}") from None
        if len(encoded) <= MAX_KEY_BYTES:
            return encoded
        raise InvalidJob(f"{what} is {len(encoded)} bytes in UTF-8, over the limit of {MAX_KEY_BYTES}")
    raise InvalidJob(f"{what} must be a non-empty str of at most {max_chars} characters, not {value!r}")
