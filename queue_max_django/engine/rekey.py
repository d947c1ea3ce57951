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

Then the same for what workflows keep beside their jobs (``Store.workflows.export_nodes`` and ``rewrite``,
``[sc_workflow_rewrite]``): a waiting node's payload and metadata (its job is written from them when its
last parent ends), and each finished node's result and error text (what its children are given). A node
that changed while it was read (released, ended) is counted in ``nodes_changed``: a next run takes it.
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
from .stores.contract.workflows import NodeData, NodeRef

__all__ = ["RekeyReport", "node_kids", "rekey", "reseal_fields", "reseal_node"]


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
    # the workflows' nodes (their waiting payloads and metadata, their results and error texts)
    nodes_resealed: int = 0
    nodes_current: int = 0  # nodes whose sealed data already was under the newest key
    nodes_changed: int = 0  # nodes that changed between the read and the write: a next run takes them
    nodes_broken: list[NodeRef] = field(default_factory=list)  # (workflow id, index) whose data does not open
    nodes_left: Counter[str] = field(default_factory=Counter)  # key id -> nodes still holding data under it

    def as_dict(self) -> dict[str, Any]:
        return {
            "key_id": self.key_id, "resealed": self.resealed, "current": self.current, "clear": self.clear,
            "changed": self.changed, "broken": self.broken, "left_under_old_keys": dict(self.left),
            "running": self.running, "batches": self.batches,
            "nodes_resealed": self.nodes_resealed, "nodes_current": self.nodes_current,
            "nodes_changed": self.nodes_changed, "nodes_broken": [list(ref) for ref in self.nodes_broken],
            "nodes_left_under_old_keys": dict(self.nodes_left),
        }  # fmt: skip

    @property
    def done(self) -> bool:
        """Nothing is left under old keys: no job, no node, and no job was running."""
        return not self.left and not self.nodes_left and not self.running


def _found_kids(
    values: tuple[bytes | None, ...], texts: tuple[str | None, ...], metadata: bytes | None
) -> set[str]:
    found: set[str | None] = set()
    for data in values:
        if data is not None and data[:1] in (b"\xc7", b"\xc8", b"\xc9"):  # ext 8, 16, 32: maybe sealed
            value = codec.unpack_value(data)
            if is_sealed(value):
                found.add(key_id_of(value))
    for text in texts:
        if is_sealed_text(text):
            found.add(key_id_of(text))
    if metadata is not None and METADATA_KEY.encode() in metadata:
        found.add(key_id_of(json.loads(metadata).get(METADATA_KEY)))
    found.discard(None)
    return found  # type: ignore[return-value]


def _kids(fields: SealedFields) -> set[str]:
    """The key ids the sealed parts of ``fields`` were sealed under."""
    texts = (fields.error, fields.traceback, *(message for _kind, message in fields.errors))
    return _found_kids((fields.payload, fields.result), texts, fields.metadata)


def node_kids(data: NodeData) -> set[str]:
    """The key ids the sealed parts of a node's ``data`` were sealed under."""
    return _found_kids((data.payload, data.result), (data.error,), data.metadata)


def reseal_fields(sealer: Sealer, fields: SealedFields) -> SealedFields:
    """``fields`` with each sealed part sealed again under the newest key (each one as it is when it already
    is, or is not sealed). ``SealBroken`` when a part does not open."""

    return SealedFields(
        _value(sealer, fields.payload, "payload") or b"",
        _value(sealer, fields.result, "result"),
        sealer.reseal(fields.error, "error"),
        sealer.reseal(fields.traceback, "traceback"),
        tuple((kind, sealer.reseal(message, "error")) for kind, message in fields.errors),
        _metadata(sealer, fields.metadata),
    )


def reseal_node(sealer: Sealer, data: NodeData) -> NodeData:
    """A node's ``data`` with each sealed part sealed again under the newest key (as ``reseal_fields``: a
    node keeps its job's payload, metadata, result and error as the job does). ``SealBroken`` when a part
    does not open."""
    return NodeData(
        _value(sealer, data.payload, "payload"),
        _metadata(sealer, data.metadata),
        _value(sealer, data.result, "result"),
        sealer.reseal(data.error, "error"),
    )


def _value(sealer: Sealer, data: bytes | None, what: str) -> bytes | None:
    if data is None:
        return None
    found = codec.unpack_value(data)
    if not is_sealed(found) or key_id_of(found) == sealer.kid:
        return data
    return codec.pack_value(sealer.reseal(found, what), what=what, limit=1 << 62)


def _metadata(sealer: Sealer, metadata: bytes | None) -> bytes | None:
    if metadata is not None and METADATA_KEY.encode() in metadata:
        stored = json.loads(metadata)
        sealed = stored.get(METADATA_KEY)
        if is_sealed_text(sealed) and key_id_of(sealed) != sealer.kid:
            stored[METADATA_KEY] = sealer.reseal(sealed, "metadata")
            metadata = json.dumps(stored, ensure_ascii=False, separators=(",", ":")).encode()
    return metadata


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
    _rekey_nodes(store, sealer, batch, report, progress)  # first: a node released meanwhile is a job below
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


def _rekey_nodes(
    store: Store,
    sealer: Sealer,
    batch: int,
    report: RekeyReport,
    progress: Callable[[RekeyReport], None] | None,
) -> None:
    """The pass over the workflows' nodes: each batch read, sealed again, written back where unchanged."""
    for shard in range(store.shards):
        after: NodeRef | None = None
        while nodes := store.workflows.export_nodes(shard, after, batch):
            after = nodes[-1][0]
            changes: list[tuple[NodeRef, NodeData, NodeData]] = []
            for ref, old in nodes:
                kids = node_kids(old)
                if not kids:
                    continue
                if kids == {sealer.kid}:
                    report.nodes_current += 1
                    continue
                try:
                    changes.append((ref, old, reseal_node(sealer, old)))
                except SealBroken:
                    report.nodes_broken.append(ref)
                    report.nodes_left.update(kids - {sealer.kid})
            if not changes:
                continue
            written = set(store.workflows.rewrite(shard, changes))
            report.nodes_resealed += len(written)
            for ref, old, _new in changes:
                if ref not in written:
                    report.nodes_changed += 1
                    report.nodes_left.update(node_kids(old) - {sealer.kid})
            report.batches += 1
            if progress is not None:
                progress(report)
