"""A job's metadata: a small JSON dict stored with the job, set at put (``put(metadata=...)``) and saved
again by the holder of a running job (``Record.save_metadata``). Both stores keep it as its JSON text (the
LMDB record: UTF-8 bytes in one field; PostgreSQL: a ``jsonb`` column); no metadata is stored as nothing
and reads back as ``{}``, as does a record written before metadata existed.

The engine stores the whole dict. Keys that start with ``RESERVED_PREFIX`` are, by Django's Tasks rule,
the backend's and libraries' (hidden from ``JobResult.metadata``, kept when a task saves its own): that
rule is the Django layer's (``queue_max_django/context.py``), not the engine's.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .errors import InvalidMetadata
from .nesting import depth

METADATA_MAX_BYTES = 64 * 1024  # the JSON text, UTF-8 encoded
METADATA_MAX_DEPTH = 64  # dicts and lists within one another, the metadata dict itself the first
TOO_DEEP = (
    f"metadata is nested over {METADATA_MAX_DEPTH} levels deep (dicts and lists within one another): "
    "keep it flat"
)
RESERVED_PREFIX = "_"
_NODE_ONLY = re.compile(rb'\{"_workflow":\[(\d+),(\d+)\]\}\Z')  # what workflows.node_metadata writes alone
_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")  # an escaped NUL character in JSON text


def pack_metadata(metadata: Any) -> bytes | None:
    """``metadata`` as stored: its compact JSON text, UTF-8 (None for None or an empty dict). Raises
    ``InvalidMetadata`` for anything but a dict of str keys that JSON encodes (no NaN or infinity, and no
    NUL character, which PostgreSQL's ``jsonb`` refuses) within ``METADATA_MAX_BYTES`` and
    ``METADATA_MAX_DEPTH`` levels (deeper data would fit in the bytes, but copying it, as a running job's
    context does, or reading it back can exceed Python's recursion limit)."""
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        raise InvalidMetadata(f"metadata must be a dict, not {type(metadata).__name__}")
    if not metadata:
        return None
    for key in metadata:
        if not isinstance(key, str):
            raise InvalidMetadata(f"metadata keys must be strings, not {key!r}")
    try:
        text = json.dumps(metadata, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
        data = text.encode()
    except RecursionError:  # nested past what the encoder can walk (Python 3.11's gives up first)
        raise InvalidMetadata(TOO_DEEP) from None
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        raise InvalidMetadata(f"metadata must be JSON-serializable: {exc}") from None
    if "\\u0000" in text and _NUL.search(text):
        raise InvalidMetadata("metadata strings cannot hold NUL characters (PostgreSQL's jsonb refuses them)")
    if (
        text.count("{") + text.count("[") > METADATA_MAX_DEPTH
        and depth(metadata, METADATA_MAX_DEPTH) > METADATA_MAX_DEPTH
    ):
        raise InvalidMetadata(TOO_DEEP)
    if len(data) > METADATA_MAX_BYTES:
        raise InvalidMetadata(
            f"metadata is {len(data):,} bytes as JSON, over the limit of {METADATA_MAX_BYTES:,} bytes: keep "
            f"it small (progress, ids, labels) and store large data elsewhere"
        )
    return data


def normalized(metadata: Any) -> dict[str, Any]:
    """``metadata`` checked (``pack_metadata``) and as it reads back: a new dict of JSON values (tuples
    are lists), shared with nothing the caller holds."""
    return unpack_metadata(pack_metadata(metadata))


def with_cancel_note(stored: bytes | None, note: dict[str, Any]) -> bytes | None:
    """``stored`` metadata (a running job's) with ``note`` under ``job.CANCEL_KEY`` (a cancel request's who
    and when); ``stored`` unchanged when it does not decode or the note would take it over the size limit."""
    from .job import CANCEL_KEY

    try:
        return pack_metadata({**unpack_metadata(stored), CANCEL_KEY: note})
    except (ValueError, InvalidMetadata):
        return stored


def keeping_cancel_note(stored: bytes | None, new: bytes | None) -> bytes | None:
    """``new`` metadata (a holder's save) with the store's own keys ``stored`` holds, if any: the cancel note
    (written by ``cancel``), a workflow node's link (``workflows.WORKFLOW_KEY``) and the note of the unique
    key it was put with (``job.UNIQUE_NOTE_KEY``), so a task that saves its own metadata never erases who
    cancelled it, the workflow it belongs to, nor its key; nor its tags (``tags.TAGS_KEY``: the store indexes
    a job under the tags it was put with, for its whole life)."""
    from .job import CANCEL_KEY, UNIQUE_NOTE_KEY
    from .tags import TAGS_KEY
    from .workflows import WORKFLOW_KEY

    own = (CANCEL_KEY, WORKFLOW_KEY, UNIQUE_NOTE_KEY, TAGS_KEY)
    if stored is None or not any(key.encode() in stored for key in own):
        return new
    try:
        old = unpack_metadata(stored)
        kept = {key: old[key] for key in own if key in old}
        return new if not kept else pack_metadata({**unpack_metadata(new), **kept})
    except (ValueError, InvalidMetadata):
        return new


def unpack_metadata(raw: bytes | str | None) -> dict[str, Any]:
    """Stored metadata (JSON text as bytes or str; None: none) as a dict; ``ValueError`` if it is not
    the JSON of a dict (``codec.job_from_stored`` reports that as damage)."""
    if raw is None:
        return {}
    if type(raw) is bytes and raw.startswith(b'{"_workflow":['):
        found = _NODE_ONLY.match(raw)  # a workflow node's job with no metadata of its own (a chord's members)
        if found is not None:
            return {"_workflow": [int(found[1]), int(found[2])]}
    value = json.loads(raw)
    if type(value) is not dict:
        raise ValueError(f"stored metadata is not a JSON object: {raw[:80]!r}")
    return value
