"""``JobSpec``: the options one ``put``/``put_many`` gives its jobs (everything but the payload), validated.

Store-neutral: a store reads the fields. ``encoded`` is the one slot a store may fill, once, with its own
encoding of these options (the LMDB store: the constant bytes of the new records, ``stores/lmdb/newrecords``);
the Queue keeps a spec per option set it has seen (``options.PutOptions``), so that encoding is made once.
A ``variant`` of a spec (other metadata or limits, per put: a unique key's note, a keyed limit) names the
spec it was made from (``base``), so that a store encodes only what differs.
"""

from __future__ import annotations

from typing import Any


class JobSpec:
    """Validated options of new jobs (see ``options.PutOptions``)."""

    __slots__ = (
        "base",
        "concurrency",
        "encoded",
        "max_retries",
        "metadata",
        "name",
        "partition_key",
        "priority",
        "queue",
        "ready_at",
        "timeout",
    )

    def __init__(
        self,
        queue: str,
        name: str | None,
        priority: int,
        ready_at: float | None,
        max_retries: int,
        timeout: float | None,
        partition_key: Any,
        metadata: bytes | None = None,
    ) -> None:
        self.queue = queue
        self.name = name
        self.priority = priority
        self.ready_at = ready_at  # None: pending at once; otherwise scheduled until then (unix seconds)
        self.max_retries = max_retries
        self.timeout = timeout
        self.partition_key = partition_key
        self.metadata = metadata  # its JSON text (metadata.pack_metadata), None: none
        self.encoded: object = None  # the store's encoding of these options, made on first use
        # concurrency limits ((key, n), ...) the jobs run under (engine/concurrency.py), None: none
        self.concurrency: tuple[tuple[str, int], ...] | None = None
        self.base: JobSpec | None = None  # the spec this one is a variant of (``variant``), None: none

    def __repr__(self) -> str:
        return (
            f"JobSpec(queue={self.queue!r}, name={self.name!r}, priority={self.priority}, "
            f"ready_at={self.ready_at!r}, max_retries={self.max_retries}, timeout={self.timeout!r}, "
            f"partition_key={self.partition_key!r}, metadata={self.metadata!r}, "
            f"concurrency={self.concurrency!r})"
        )


_UNSET: Any = object()


def variant(spec: JobSpec, *, metadata: Any = _UNSET, concurrency: Any = _UNSET) -> JobSpec:
    """A copy of ``spec`` with other ``metadata`` (packed) and/or ``concurrency`` (checked limits), naming
    the spec it comes from (``base``: the first one not a variant) so that a store's encoding of it
    (``encoded``) can start from that one's. The spec given stays as it is (the Queue caches it)."""
    copy = JobSpec(spec.queue, spec.name, spec.priority, spec.ready_at, spec.max_retries, spec.timeout,
                   spec.partition_key, spec.metadata if metadata is _UNSET else metadata)  # fmt: skip
    copy.concurrency = spec.concurrency if concurrency is _UNSET else concurrency
    copy.base = spec if spec.base is None else spec.base
    return copy
