"""The embedded job store and queue. Pure Python + lmdb + msgpack; never imports Django."""

from .aio import AsyncQueue, AsyncRecord
from .errors import (
    ConfigurationError,
    InvalidJob,
    PayloadNotSerializable,
    PayloadTooLarge,
    QueueClosed,
    QueueCorrupted,
    QueueEmpty,
    QueueError,
    StoreError,
    StoreFull,
    StoreMismatch,
    UnknownQueue,
)
from .job import Job, State
from .queue import Queue, Record
from .retry import backoff_delay

__all__ = [
    "AsyncQueue",
    "AsyncRecord",
    "ConfigurationError",
    "InvalidJob",
    "Job",
    "PayloadNotSerializable",
    "PayloadTooLarge",
    "Queue",
    "QueueClosed",
    "QueueCorrupted",
    "QueueEmpty",
    "QueueError",
    "Record",
    "State",
    "StoreError",
    "StoreFull",
    "StoreMismatch",
    "UnknownQueue",
    "backoff_delay",
]
