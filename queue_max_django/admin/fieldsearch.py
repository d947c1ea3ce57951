"""The search words ``args.NAME:VALUE`` and ``meta.KEY:VALUE`` of the admin's job lists: jobs whose argument
``NAME`` (by the task's parameter name, as the job's page labels it) or whose metadata key ``KEY`` is
``VALUE``. Unindexed: tested on each job a list walks, so a page scans at most ``listing.PAGE_SCAN_LIMIT``
jobs (an "all that match" action ``listing.SCAN_LIMIT``) and says where it stopped; tag them
(``tag:T``, indexed) for a search that costs what it finds."""

from __future__ import annotations

import json
import re
from typing import Any

from ..encryption.jobs import is_encrypted_job
from ..engine import Job
from . import display, payloads

FIELD_WORD = re.compile(r"(?P<kind>args|meta)\.(?P<name>[A-Za-z_][A-Za-z0-9_]*):(?P<value>.+)", re.IGNORECASE)

Field = tuple[str, str, str]  # ("args" or "meta", the name, the value as typed)


def field_of(word: str) -> Field | None:
    """The field a search word names (``args.order_id:42``), or None for another word."""
    found = FIELD_WORD.fullmatch(word)
    if found is None:
        return None
    return found["kind"].lower(), found["name"], found["value"]


def _same(stored_json: str, typed: str) -> bool:
    """A stored value (as JSON) is what was typed: its JSON (``42``, ``true``) or a string's text."""
    if stored_json == typed:
        return True
    try:
        return bool(json.loads(stored_json) == typed)
    except ValueError:
        return False


def matches(job: Job, field: Field, *, decrypt: bool = False) -> bool:
    """Whether ``job`` has ``field``; an encrypted job's sealed data is looked into only with ``decrypt``
    (the viewer holds ``view_job_payload``: admin/payloads.py), else it matches no such search."""
    if is_encrypted_job(job):
        found = payloads.opened(job) if decrypt else None
        if found is None:
            return False
        job = found
    kind, name, typed = field
    if kind == "meta":
        if name not in job.metadata:
            return False
        return _same(json.dumps(job.metadata[name], ensure_ascii=False), typed)
    arguments = display.arguments(job.payload, job.name)
    values: list[tuple[str, Any]] = arguments.values
    return any(
        label.rstrip("=") == name and _same(json.dumps(json.loads(text), ensure_ascii=False), typed)
        for label, text in values
        if _decodes(text)
    )


def _decodes(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True
