"""The listing of the LMDB store's tag index (engine/tags.py): one database per shard, ``tags``, whose keys
are (tag, NUL, job id as 8 bytes big-endian) and whose values are empty (``tagkeys.py``). An entry is written
in the transaction that puts the job and removed in the one that deletes it (``access.delete_job``: delete,
purge, retention, a cancel of a waiting job), so a listing by tag walks that tag's entries only: it costs
what it finds.

A tag holds no NUL (``tags.check_tag`` allows letters, digits and a few marks), so one tag's entries are one
key range, in job id order. A stray entry (its job gone, or quarantined with metadata that no longer names the
tag) is passed over by a listing, never shown.
"""

from __future__ import annotations

from typing import Any

from ...errors import QueueCorrupted
from ...job import STATE_CODE, Job, State
from ...tags import stored_tags
from .access import ShardDbs, load_payload, load_record
from .layout import F_METADATA, F_NAME, F_QUEUE, F_STATE
from .reads import Listed
from .tagkeys import ID, tag_prefix

_LAST_ID = ID.pack((1 << 64) - 1)


def tagged(
    shard: ShardDbs,
    tags: tuple[str, ...],
    *,
    state: State | None,
    queue: str | None,
    name: str | None,
    after: int | None,
    limit: int,
) -> list[Listed]:
    """Up to ``limit`` jobs of this shard that have every one of ``tags``, newest first (by id), with ids
    below ``after``: a walk of the first tag's entries, from the newest back."""
    prefix = tag_prefix(tags[0])
    others = set(tags[1:])
    code = None if state is None else STATE_CODE[state]
    db = shard.tags

    def txn_fn(txn: Any) -> list[Listed]:
        out: list[Listed] = []
        cursor = txn.cursor(db=db)
        target = prefix + (_LAST_ID if after is None else ID.pack(after))
        found = cursor.prev() if cursor.set_range(target) else cursor.last()
        while found and len(out) < limit:
            key = cursor.key()
            if not key.startswith(prefix):
                break
            job_id = ID.unpack(key[-8:])[0]
            found = cursor.prev()
            try:
                record = load_record(shard, txn, job_id)
            except QueueCorrupted:  # quarantined by the next read that meets it (and then has no tags)
                continue
            if (
                record is None
                or (code is not None and record[F_STATE] != code)
                or (queue is not None and record[F_QUEUE] != queue)
                or (name is not None and record[F_NAME] != name)
            ):
                continue
            stored = stored_tags(record[F_METADATA])
            if tags[0] not in stored or not others.issubset(stored):  # a stray entry
                continue
            out.append(Listed(key[-8:], job_id, record, load_payload(shard, txn, job_id, record)))
        return out

    return shard.env.read(txn_fn)


def tagged_jobs(
    store: Any,
    now: float,
    tags: tuple[str, ...],
    *,
    state: State | None,
    queue: str | None,
    name: str | None,
    after: int | None,
    limit: int,
) -> list[Job]:
    """``LmdbStore.tagged_jobs`` (a method of the store, kept here: the store's module is full): each shard's
    newest ``limit`` jobs of the tags, merged by id; only what is returned is decoded."""
    found: list[Listed] = []
    for shard in store._shards:
        found.extend(tagged(shard, tags, state=state, queue=queue, name=name, after=after, limit=limit))
    found.sort(key=lambda item: item.job_id, reverse=True)
    return [listed.job() for listed in found[:limit]]
