"""A job's tags: short strings that say what a job is about (``order:42``, ``tenant:acme``, ``billing``), set
when it is put, and indexed by every store so that finding the jobs of a tag costs what it
finds, not the size of the store (``Queue.tagged``, stores/contract/tags.py).

They are kept in the job's metadata under the reserved key ``TAGS_KEY`` (a list of str, sorted, no
duplicates), so they travel with the job wherever its metadata does (put, put_many, requeue) and every store
already stores them; each store's tag index is written in the transaction that puts the job and removed in the
one that deletes it (delete, purge, retention, a cancel of a waiting job). A holder that saves the job's
metadata keeps them (``metadata.keeping_cancel_note``); only a duplicate put that replaces a waiting job's
metadata (``on_duplicate`` replace) gives it other tags, and the store re-indexes it in that put's
transaction.

A tag: 1 to ``TAG_MAX_CHARS`` characters, each a letter or digit (ASCII) or one of ``TAG_PUNCTUATION``; at
most ``TAGS_MAX`` tags per job. ``check_tags`` refuses anything else with ``InvalidJob`` before anything is
written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from .errors import InvalidJob

TAGS_KEY = "_tags"  # the metadata key (reserved: "_" first) that holds a job's tags
TAGS_MARK = b'"_tags"'  # in a job's stored metadata (JSON text) when it may have tags: a cheap test first
TAG_MAX_CHARS = 64
TAGS_MAX = 16
TAG_PUNCTUATION = ":._-/@=+#"
TAG_PATTERN = _TAG = re.compile(rf"[A-Za-z0-9:._\-/@=+#]{{1,{TAG_MAX_CHARS}}}")  # a valid tag, whole


def check_tag(tag: Any, *, what: str = "tag") -> str:
    """``tag`` if it is a valid tag; ``InvalidJob`` naming the rule otherwise."""
    if not isinstance(tag, str):
        raise InvalidJob(f"a {what} must be a str, not {type(tag).__name__} ({tag!r})")
    if not tag:
        raise InvalidJob(f"a {what} cannot be empty")
    if len(tag) > TAG_MAX_CHARS:
        raise InvalidJob(f"a {what} is at most {TAG_MAX_CHARS} characters, not {len(tag)} ({tag[:20]!r}...)")
    if _TAG.fullmatch(tag) is None:
        raise InvalidJob(
            f"{what} {tag!r}: only ASCII letters, digits and {TAG_PUNCTUATION!r} are allowed (no spaces)"
        )
    return tag


def check_tags(tags: Any) -> tuple[str, ...]:
    """``tags`` (a list or tuple of str) checked, duplicates dropped, sorted; ``InvalidJob`` before anything
    is written for anything else: another type (a bare str is refused, not read as its characters), an
    empty or too long tag, a character outside the allowed set, more than ``TAGS_MAX`` distinct tags."""
    if not isinstance(tags, (list, tuple)):
        raise InvalidJob(f"tags must be a list or tuple of str, not {type(tags).__name__} ({tags!r})")
    checked = sorted({check_tag(tag) for tag in tags})
    if len(checked) > TAGS_MAX:
        raise InvalidJob(f"a job has at most {TAGS_MAX} tags, not {len(checked)}")
    return tuple(checked)


def with_tags(metadata: dict[str, Any] | None, tags: Iterable[str]) -> dict[str, Any] | None:
    """``metadata`` with ``tags`` (checked) under ``TAGS_KEY``; ``metadata`` as it is for no tags."""
    checked = check_tags(list(tags))
    if not checked:
        return metadata
    return {**(metadata or {}), TAGS_KEY: list(checked)}


def tags_of(metadata: dict[str, Any] | None) -> tuple[str, ...]:
    """The tags stored in a job's ``metadata`` (those that are valid tags: a store indexes only those)."""
    value = (metadata or {}).get(TAGS_KEY)
    if not isinstance(value, list):
        return ()
    return tuple(sorted({tag for tag in value if isinstance(tag, str) and _TAG.fullmatch(tag) is not None}))


def stored_tags(packed: bytes | None) -> tuple[str, ...]:
    """``tags_of`` a job's stored metadata (its JSON text); () when it has none or does not decode."""
    if packed is None or TAGS_MARK not in packed:
        return ()
    try:
        value = json.loads(packed)
    except ValueError:
        return ()
    return tags_of(value) if type(value) is dict else ()
