"""``PutOptions``: a Queue's check of the options of a put (everything but the payload), which runs on every
put: the common case (options used before, no delay) costs a few type checks and a dict lookup, because the
``JobSpec`` of an option set is kept once it was validated."""

from __future__ import annotations

import datetime as _dt
from typing import Any

from .jobspec import JobSpec
from .metadata import pack_metadata
from .tags import TAGS_KEY, TAGS_MARK, check_tags
from .validate import check_put, ready_at

SPEC_CACHE_MAX = 256  # JobSpecs kept for option sets used before (no delay, eta or partition key)


class PutOptions:
    def __init__(self, served: frozenset[str] | None, max_retries: int) -> None:
        self._served = served  # the queue names the Queue serves, None: any
        self._max_retries = max_retries  # the Queue's default
        self._valid_queues: set[str] = set()  # queue names already validated
        self._valid_names: set[str] = set()  # job names already validated
        self._cache: dict[tuple[Any, ...], JobSpec] = {}

    def check(
        self,
        *,
        priority: int,
        delay: float | None,
        eta: float | _dt.datetime | None,
        queue: str,
        name: str | None,
        max_retries: int | None,
        timeout: float | None,
        partition_key: Any,
        now: float,
        metadata: Any = None,
    ) -> JobSpec:
        """Validate everything but the payload. Raises ``InvalidJob``; runs on every put, so the common
        case (options used before, no delay) costs a few type checks and a dict lookup."""
        if (
            delay is None and eta is None and timeout is None and partition_key is None and metadata is None
            and type(priority) is int and (max_retries is None or type(max_retries) is int)
        ):  # fmt: skip
            # Options seen before: their JobSpec was validated then (the types checked here keep a bool
            # or a float from matching an equal int's entry).
            spec = self._cache.get((queue, name, priority, max_retries, None))
            if spec is not None:
                return spec
        check_put(priority=priority, queue=queue, name=name, max_retries=max_retries, timeout=timeout,
                  partition_key=partition_key, queues=self._served, now=now, valid_queues=self._valid_queues,
                  valid_names=self._valid_names)  # fmt: skip
        packed = pack_metadata(metadata)  # InvalidMetadata before anything is written
        if packed is not None and TAGS_MARK in packed and TAGS_KEY in metadata:
            check_tags(metadata[TAGS_KEY])  # InvalidJob: the tags a store indexes are all valid ones
        given_max_retries = max_retries  # None (the Queue's default) is its own cache entry
        if max_retries is None:
            max_retries = self._max_retries
        if partition_key is None and delay is None and eta is None and packed is None:
            # Validated values only: priority and max_retries ints (not bools; max_retries None for the
            # Queue's default: looked up as given, above), timeout a number, so equal keys mean equal
            # records (timeout 1 and 1.0 share one: both are stored as 1.0).
            key = (queue, name, priority, given_max_retries, timeout)
            spec = self._cache.get(key)
            if spec is None:
                if len(self._cache) >= SPEC_CACHE_MAX:
                    self._cache.clear()
                spec = self._cache[key] = JobSpec(
                    queue, name, priority, None, max_retries, _seconds(timeout), None
                )
            return spec
        ready = None if delay is None and eta is None else ready_at(delay, eta, now)
        return JobSpec(queue, name, priority, ready, max_retries, _seconds(timeout), partition_key, packed)


def _seconds(timeout: float | None) -> float | None:
    return None if timeout is None else float(timeout)
