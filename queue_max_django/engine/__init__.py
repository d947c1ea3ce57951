"""The embedded job store and queue. Pure Python + lmdb + msgpack; never imports Django.

``AsyncQueue`` and ``AsyncRecord`` (``aio.py``) load on first access: a process that works synchronously (the
worker's supervisor, a command) does not compile or import them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .breaker import BreakerPolicy, BreakerState, InvalidBreakerPolicy
from .cancels import Cancelled, CancelOutcome
from .classify import Decision, Permanent, Retry, classify, is_interrupt
from .errors import (
    ConfigurationError,
    DuplicateJob,
    InvalidJob,
    InvalidMetadata,
    PayloadNotSerializable,
    PayloadTooLarge,
    QueueClosed,
    QueueCorrupted,
    QueueEmpty,
    QueueError,
    RateLimited,
    SchemaError,
    StoreError,
    StoreFull,
    StoreMismatch,
    StoreUnavailable,
    UnknownQueue,
)
from .events import (
    ALERT,
    EVENTS,
    JOB_CANCELLED,
    JOB_ENQUEUED,
    JOB_FAILED,
    JOB_LOST,
    JOB_RETRIED,
    JOB_STARTED,
    JOB_SUCCEEDED,
    Events,
)
from .flowstate import GLOBAL_KEY, NAME_KEY_PREFIX, QUEUE_KEY_PREFIX, job_keys
from .job import CANCELLED, CancelNote, Job, State, UniqueNote
from .metadata import METADATA_MAX_BYTES, METADATA_MAX_DEPTH
from .pausestate import Pause
from .queue import Queue
from .ratelimit import InvalidRate, Rate, parse_rate
from .record import Record
from .retry import backoff_delay
from .stores.lmdb.env import StoreInUse
from .stores.types import LockHolder, WorkerInfo
from .uniqueness import UniquePut

if TYPE_CHECKING:
    from .aio import AsyncQueue, AsyncRecord

__all__ = [
    "ALERT",
    "CANCELLED",
    "EVENTS",
    "GLOBAL_KEY",
    "JOB_CANCELLED",
    "JOB_ENQUEUED",
    "JOB_FAILED",
    "JOB_LOST",
    "JOB_RETRIED",
    "JOB_STARTED",
    "JOB_SUCCEEDED",
    "METADATA_MAX_BYTES",
    "METADATA_MAX_DEPTH",
    "NAME_KEY_PREFIX",
    "QUEUE_KEY_PREFIX",
    "AsyncQueue",
    "AsyncRecord",
    "BreakerPolicy",
    "BreakerState",
    "CancelNote",
    "CancelOutcome",
    "Cancelled",
    "ConfigurationError",
    "Decision",
    "DuplicateJob",
    "Events",
    "InvalidBreakerPolicy",
    "InvalidJob",
    "InvalidMetadata",
    "InvalidRate",
    "Job",
    "LockHolder",
    "Pause",
    "PayloadNotSerializable",
    "PayloadTooLarge",
    "Permanent",
    "Queue",
    "QueueClosed",
    "QueueCorrupted",
    "QueueEmpty",
    "QueueError",
    "Rate",
    "RateLimited",
    "Record",
    "Retry",
    "SchemaError",
    "State",
    "StoreError",
    "StoreFull",
    "StoreInUse",
    "StoreMismatch",
    "StoreUnavailable",
    "UniqueNote",
    "UniquePut",
    "UnknownQueue",
    "WorkerInfo",
    "backoff_delay",
    "classify",
    "is_interrupt",
    "job_keys",
    "parse_rate",
]


def __getattr__(name: str) -> Any:
    if name in ("AsyncQueue", "AsyncRecord"):
        from . import aio

        value = getattr(aio, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
