"""``Queue``'s puts with unique keys (a base class of ``Queue``, as ``flowcontrol.py`` is): ``put_unique``
and ``put_many_unique``, which say what each put did (``UniquePut``), and ``unique_counts``. ``Queue.put``
and ``put_many`` take the same options and give the ids. The checks are ``uniqueness.py``'s, the decision
the store's, in the put's transaction (``stores/contract/uniqueness.py``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from . import codec
from .concurrency import limited
from .errors import InvalidJob
from .jobspec import JobSpec, variant
from .metadata import pack_metadata
from .options import PutOptions
from .putting import Putter, joined
from .stores.base import Store
from .stores.types import NewJobs
from .uniqueness import SKIP, UniquePut, distinct_for_raise, noted, rule, scoped
from .validate import put_defaults

BOTH = (
    "give unique_key or partition_key, not both: the unique key routes its job to the shard where it is "
    "checked"
)


class UniquePuts:
    """Puts with unique keys. ``unique_until``: ``"started"`` (the key is held while its job waits),
    ``"finished"`` (also while it runs), a number of seconds (a window from the first job's put, whatever
    became of it), or None (the engine's own: held until ``vacuum`` forgets the key, ``max(result_ttl, a
    day)`` after its put; periodic ticks). ``on_duplicate``: ``"skip"`` (nothing stored; the holder's id),
    ``"replace"`` (the waiting holder takes the new payload, metadata and ETA; a holder that runs is not
    touched, and a new job is stored and takes the key) or ``"raise"`` (``DuplicateJob``)."""

    _clock: Callable[[], float]
    _put_options: PutOptions
    _putter: Putter
    result_ttl: float
    sync: bool
    max_payload_bytes: int

    def _live(self) -> Store:
        raise NotImplementedError  # Queue's

    def put_unique(
        self,
        payload: Any,
        *,
        unique_key: str,
        unique_until: Any = None,
        on_duplicate: str = SKIP,
        partition_key: Any = None,
        connection: Any = None,
        metadata: dict[str, Any] | None = None,
        **options: Any,
    ) -> UniquePut:
        """``put`` with a unique key: -> the id (the new job's, or the holder's) and what the put did.
        ``InvalidJob`` (nothing written) for a bad key or option, or with a ``partition_key`` (the key
        places the job). With ``concurrency`` limits the limits place the job, and its duplicates are the
        jobs with the same key and the same placement (``uniqueness.scoped``)."""
        store = self._live()
        now = self._clock()
        unique = rule(unique_key, unique_until, on_duplicate, self.result_ttl)
        if partition_key is not None:
            raise InvalidJob(BOTH)
        checked = put_defaults(options)
        concurrency = checked.pop("concurrency")
        spec = self._noted(now, checked, metadata, unique_key, unique_until, on_duplicate)
        route = None
        if concurrency is not None:
            spec, route = limited(spec, concurrency, None)
            unique = scoped(unique, route)
        return self._putter.put_one(store, now, payload, spec, unique, route, connection)

    def _noted(
        self, now: float, checked: dict[str, Any], metadata: Any, key: str, until: Any, on_duplicate: str
    ) -> JobSpec:
        """The spec of a put with a unique key: the options checked as a put without one (its cached spec,
        as often as not), then a variant with the key's note in its metadata (``noted``), so that a store
        encodes only the metadata anew."""
        checked["metadata"] = metadata
        spec = self._put_options.check(now=now, **checked)
        note = noted(metadata, key, until, on_duplicate)
        if note is metadata:
            return spec
        return variant(spec, metadata=pack_metadata(note))

    def put_many_unique(
        self,
        payloads: Iterable[Any],
        *,
        unique_keys: Iterable[str],
        unique_until: Any = None,
        on_duplicate: str = SKIP,
        partition_key: Any = None,
        connection: Any = None,
        metadata: dict[str, Any] | None = None,
        **options: Any,
    ) -> list[UniquePut]:
        """``put_many`` with one unique key per payload, each decided as ``put_unique``'s, in order: of
        several items with one key, the first is stored and the next are its duplicates (skipped, or
        replacing it; with ``"raise"`` that is refused before anything is written). Each item goes to its
        key's shard: one transaction per shard, all or nothing (one in all on a store of one shard, and in
        the caller's with ``connection``). Every key, option and payload is checked first. -> one
        ``UniquePut`` per payload, in order."""
        store = self._live()
        now = self._clock()
        items = payloads if isinstance(payloads, list) else list(payloads)
        keys = list(unique_keys)
        if len(keys) != len(items):
            raise InvalidJob(
                f"unique_keys has {len(keys)} keys for {len(items)} payloads: give one per payload"
            )
        if partition_key is not None:
            raise InvalidJob(BOTH)
        rules = [rule(key, unique_until, on_duplicate, self.result_ttl) for key in keys]
        distinct_for_raise(keys, on_duplicate)
        checked = put_defaults(options)
        concurrency = checked.pop("concurrency")
        specs = []
        for key in keys:
            specs.append(self._noted(now, checked, metadata, key, unique_until, on_duplicate))
        route = None
        if concurrency is not None:
            pairs = [limited(spec, concurrency, None) for spec in specs]
            specs = [spec for spec, _route in pairs]
            route = pairs[0][1] if pairs else None
            if route is not None:
                rules = [scoped(unique, route) for unique in rules]
        packed = codec.pack_values(items, what="payload", limit=self.max_payload_bytes)
        putter = self._putter
        parts: dict[int, list[int]] = {}
        for index, unique in enumerate(rules):
            parts.setdefault(putter.route(unique.text if route is None else route), []).append(index)
        batches = [NewJobs((packed[i],), specs[i], rules[i]) for i in range(len(items))]
        ids = [0] * len(items)
        for shard, indexes in parts.items():
            part = [batches[i] for i in indexes]
            if connection is not None:
                written = joined(store).enqueue(now, shard, part, False, connection)
            else:
                written = store.enqueue(now, shard, part, self.sync)
            for index, job_id in zip(indexes, written, strict=True):
                ids[index] = job_id
        if putter.watching:
            for index, batch in enumerate(batches):
                if not batch.unique_hit:
                    putter.announce([ids[index]], batch.spec.queue, batch.spec.name)
        return [UniquePut.of(job_id, batch) for job_id, batch in zip(ids, batches, strict=True)]

    def unique_counts(self) -> dict[str, int]:
        """Duplicates ever skipped and replaced by unique keys, store-wide (every process counted once):
        ``{"skipped": n, "replaced": n}``. O(shards)."""
        skipped, replaced = self._live().unique_counts()
        return {"skipped": skipped, "replaced": replaced}


def ids_of(puts: Sequence[UniquePut]) -> list[int]:
    return [put.job_id for put in puts]
