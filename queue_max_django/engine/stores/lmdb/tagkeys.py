"""The keys of the LMDB store's tag index (``tagged.py`` has its listing): (tag, NUL, job id as 8 bytes
big-endian) -> nothing, in the ``tags`` database of each shard. Written in the transaction that puts a job
(``index_new``), removed in the one that deletes it (``unindex``, from ``access.delete_job``)."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Any

from ...tags import TAGS_MARK, stored_tags

ID = struct.Struct(">Q")


def tag_prefix(tag: str) -> bytes:
    return tag.encode() + b"\x00"


def prefixes_of(metadata: bytes | None) -> tuple[bytes, ...]:
    """The index key prefixes of the tags in a new job's stored metadata (none: ())."""
    if metadata is None or TAGS_MARK not in metadata:
        return ()
    return tuple(tag_prefix(tag) for tag in stored_tags(metadata))


def index_new(txn: Any, db: Any, prefixes: Sequence[bytes], job_ids: Iterable[int]) -> None:
    """Enter new jobs (all with the tags of ``prefixes``) in the tag index."""
    pack = ID.pack
    keys = [pack(job_id) for job_id in job_ids]
    for prefix in prefixes:
        txn.cursor(db=db).putmulti([(prefix + key, b"") for key in keys])


def unindex(shard: Any, txn: Any, job_id: int, metadata: bytes | None) -> None:
    """Take a job that is being deleted out of the tag index (its record's metadata names its tags)."""
    key = ID.pack(job_id)
    for prefix in prefixes_of(metadata):
        txn.delete(prefix + key, db=shard.tags)
