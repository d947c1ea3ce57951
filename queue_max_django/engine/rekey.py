"""Sealing stored jobs again under the newest key (``manage.py queue_rekey``): every job that is not running
(waiting, scheduled, done with its result, dead letters), shard by shard, in batches of ``batch`` jobs read
with ``Store.transfer.export`` and written back with ``Store.transfer.rewrite`` (one transaction per batch,
only where the job still holds what was read).

A pass killed at any instant leaves every job whole: under its old key or under the new one. Run again, it
starts over and passes quickly over the jobs already under the newest key, so a rekey is resumable by
running it again. What it reports as left under old keys is what it could not seal again: data that does
not open (``broken``: tampered, or its key is no longer given), jobs that changed while it read them
(claimed, ended: a next run takes them), and jobs that were running (never read: run it again once they
ended).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import codec
from .sealing import METADATA_KEY, SealBroken, Sealer, is_sealed, is_sealed_text, key_id_of
from .stores.base import Store
from .stores.contract.transfer import MovedJob, SealedFields

__all__ = ["RekeyReport", "rekey", "reseal_fields"]


@dataclass
class RekeyReport:
    """What a pass did, and what it left under old keys."""

    key_id: str  # the newest key: what everything is sealed under after a full pass
    resealed: int = 0  # jobs sealed again under it
    current: int = 0  # jobs that already were
    clear: int = 0  # jobs with nothing sealed (tasks not encrypted)
    changed: int = 0  # jobs that changed between the read and the write: a next run takes them
    broken: list[int] = field(default_factory=list)  # ids of jobs whose sealed data does not open
    left: Counter[str] = field(default_factory=Counter)  # key id -> jobs still holding data under it
    running: int = 0  # jobs running during the pass: not read (run again once they ended)
    batches: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "key_id": self.key_id, "resealed": self.resealed, "current": self.current, "clear": self.clear,
            "changed": self.changed, "broken": self.broken, "left_under_old_keys": dict(self.left),
            "running": self.running, "batches": self.batches,
        }  # fmt: skip


def _kids(fields: SealedFields) -> set[str]:
    """The key ids the sealed parts of ``fields`` were sealed under."""
    found: set[str | None] = set()
    for data in (fields.payload, fields.result):
        if data is not None and data[:1] in (b"\xc7", b"\xc8", b"\xc9"):  # ext 8, 16, 32: maybe sealed
            value = codec.unpack_value(data)
            if is_sealed(value):
                found.add(key_id_of(value))
    for text in (fields.error, fields.traceback, *(message for _kind, message in fields.errors)):
        if is_sealed_text(text):
            found.add(key_id_of(text))
    if fields.metadata is not None and METADATA_KEY.encode() in fields.metadata:
        found.add(key_id_of(json.loads(fields.metadata).get(METADATA_KEY)))
    found.discard(None)
    return found  # type: ignore[return-value]


def reseal_fields(sealer: Sealer, fields: SealedFields) -> SealedFields:
    """``fields`` with each sealed part sealed again under the newest key (each one as it is when it already
    is, or is not sealed). ``SealBroken`` when a part does not open."""

    def value(data: bytes | None, what: str) -> bytes | None:
        if data is None:
            return None
        found = codec.unpack_value(data)
        if not is_sealed(found) or key_id_of(found) == sealer.kid:
            return data
        return codec.pack_value(sealer.reseal(found, what), what=what, limit=1 << 62)

    metadata = fields.metadata
    if metadata is not None and METADATA_KEY.encode() in metadata:
        stored = json.loads(metadata)
        sealed = stored.get(METADATA_KEY)
        if is_sealed_text(sealed) and key_id_of(sealed) != sealer.kid:
            stored[METADATA_KEY] = sealer.reseal(sealed, "metadata")
            metadata = json.dumps(stored, ensure_ascii=False, separators=(",", ":")).encode()
    return SealedFields(
        value(fields.payload, "payload") or b"",
        value(fields.result, "result"),
        sealer.reseal(fields.error, "error"),
        sealer.reseal(fields.traceback, "traceback"),
        tuple((kind, sealer.reseal(message, "error")) for kind, message in fields.errors),
        metadata,
    )


def rekey(
    store: Store,
    sealer: Sealer,
    *,
    batch: int = 200,
    progress: Callable[[RekeyReport], None] | None = None,
) -> RekeyReport:
    """One pass over ``store``: every job that is not running sealed again under ``sealer``'s first key.
    ``progress(report)`` after each batch written. -> what it did and what is left under old keys."""
    if batch < 1:
        raise ValueError(f"batch must be at least 1, not {batch!r}")
    report = RekeyReport(sealer.kid)
    for shard in range(store.shards):
        after: int | None = None
        while jobs := store.transfer.export(shard, after, batch):
            after = jobs[-1].job_id
            changes = _changes(sealer, jobs, report)
            if changes:
                written = set(store.transfer.rewrite(shard, changes))
                report.resealed += len(written)
                for job_id, old, _new in changes:
                    if job_id not in written:
                        report.changed += 1
                        report.left.update(_kids(old) - {sealer.kid})
                report.batches += 1
                if progress is not None:
                    progress(report)
    report.running = int(store.counts()["running"])
    return report


def _changes(
    sealer: Sealer, jobs: list[MovedJob], report: RekeyReport
) -> list[tuple[int, SealedFields, SealedFields]]:
    changes = []
    for job in jobs:
        old = SealedFields.of(job)
        kids = _kids(old)
        if not kids:
            report.clear += 1
            continue
        if kids == {sealer.kid}:
            report.current += 1
            continue
        try:
            changes.append((job.job_id, old, reseal_fields(sealer, old)))
        except SealBroken:
            report.broken.append(job.job_id)
            report.left.update(kids - {sealer.kid})
    return changes
