"""The engine's exceptions: one base class, each subclass says what went wrong and how to fix it."""

from __future__ import annotations


class QueueError(Exception):
    """Base class of every error the engine raises. Raw ``lmdb.Error``s never escape; they are wrapped."""


class QueueEmpty(QueueError):
    """``get()`` found no job it was allowed to take before its timeout ran out."""


class QueueClosed(QueueError):
    """The queue was closed; open a new ``Queue`` on the same path to go on."""


class QueueCorrupted(QueueError):
    """A completion that the store refuses: the record's claim token no longer matches the job on disk
    (its lease expired and another holder claimed it), the job was already acked/nacked/released, the job
    is not running, or the data on disk is inconsistent. Nothing was changed."""


class InvalidJob(QueueError, ValueError):
    """An argument to ``put()`` (or a similar call) is out of range or of the wrong type.

    Nothing was written. The message names the argument and the allowed values."""


class PayloadNotSerializable(InvalidJob, TypeError):
    """The payload (or result) holds a value msgpack cannot encode.

    Payloads must be msgpack data: ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes`` and
    lists/tuples/dicts of those. Convert dates, decimals, model instances, etc. to one of those first."""


class PayloadTooLarge(InvalidJob):
    """The encoded payload (or result) is bigger than ``max_payload_bytes``.

    Store large data elsewhere (a file, the database) and put a reference to it in the payload, or raise
    ``max_payload_bytes`` when you open the queue."""


class InvalidMetadata(InvalidJob, TypeError):
    """A job's metadata (``put(metadata=...)``, ``Record.save_metadata``) is not a dict of str keys whose
    values JSON encodes, or is over ``METADATA_MAX_BYTES`` (64 KiB) encoded or ``METADATA_MAX_DEPTH`` (64)
    dicts and lists deep. Nothing was written. Keep
    metadata small (progress, a trace id, a label); put large data elsewhere and store a reference."""


class UnknownQueue(InvalidJob):
    """The named queue is not one of the ``queues=`` the ``Queue`` was opened with."""


class StoreMismatch(QueueError):
    """The store on disk was created with another shard count or layout version than the one asked for.

    Open it with ``shards=None`` (or the count on disk). To change the shard count, drain the queue and create
    a new store at another path; the engine never reshuffles jobs silently."""


class StoreFull(QueueError):
    """A shard's LMDB map reached ``map_size_max``. The store stays readable; ack, purge or vacuum jobs, or
    open the queue with a larger ``map_size_max``."""


class StoreError(QueueError):
    """The store reported an error the engine cannot handle itself: LMDB (disk full, permissions, I/O
    error) or PostgreSQL (the server cannot be reached, or dropped the connection before the operation was
    known to commit). The underlying ``lmdb.Error`` or ``psycopg.Error`` is chained as ``__cause__``."""


class StoreUnavailable(StoreError):
    """The PostgreSQL store's server cannot be reached (refused, timed out, or the password is wrong):
    no connection was made, so nothing of the operation was written. Waiting and trying again is safe."""


class SchemaError(StoreError):
    """The PostgreSQL store's tables are missing, or at another schema version than this code's: the
    message names the command that fixes it (``manage.py migrate``)."""


class ConfigurationError(QueueError, ValueError):
    """An argument of ``Queue(...)`` is out of range or of the wrong type. The message names it."""


class RateLimited(QueueError):
    """``acquire()`` could not get a token before its timeout. ``retry_after`` says how many seconds until
    one will be there (at the current rate)."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class DuplicateJob(QueueError):
    """A put with a unique key and ``on_duplicate="raise"`` met a job that holds that key: nothing of the
    put was written. ``job_id`` is the job that holds the key (``Queue.job(job_id)`` reads it); ``key`` is
    the key. Skip such puts instead with ``on_duplicate="skip"``, or update the waiting job with
    ``"replace"``."""

    def __init__(self, job_id: int, key: str) -> None:
        super().__init__(
            f"job {job_id} holds the unique key {key!r}: this job is its duplicate, and nothing was stored "
            f"(on_duplicate='raise')"
        )
        self.job_id = job_id
        self.key = key

    def __reduce__(self) -> tuple[type[DuplicateJob], tuple[int, str]]:
        return DuplicateJob, (self.job_id, self.key)
