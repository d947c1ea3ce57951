"""Tasks whose outcome the store cannot take as it is (tests/faults/test_unfinishable_outcome.py), in a
module of their own: that test imports them into its own process, where ``tasks.py``'s periodic task would
stay registered for the tests after it. ``tasks.py`` imports ``unfinishable``, so a worker discovers it."""

from __future__ import annotations

from queue_max_django import current_job, task

from .marks import mark

TRIGGERS = (
    "metadata-key",
    "metadata-deep",
    "metadata-nul",
    "metadata-surrogate",
    "error-surrogate",
    "error-nul",
    "error-unprintable",
    "result-surrogate",
    "result-nul",
    "result-deep",
)
"""What ``leave`` can leave behind: each one an outcome the store cannot take as it is."""


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("this exception cannot be shown")


def deep(levels: int) -> dict[str, object]:
    nested: dict[str, object] = {}
    for _ in range(levels):
        nested = {"d": nested}
    return nested


def leave(trigger: str) -> object:
    """Leaves what ``trigger`` (one of ``TRIGGERS``) names in the outcome of the running job: metadata with a
    non-string key, 5,000 levels deep, or with a NUL or a lone surrogate in a string; an exception whose
    message has a lone surrogate (a file name decoded with ``surrogateescape``) or a NUL, or whose ``str()``
    fails; a return value with either, or 5,000 levels deep. Marks ``trigger`` first. Shared by
    ``unfinishable`` and its ``django.tasks`` twin."""
    mark("left", trigger)
    kind, what = trigger.split("-")
    odd = {"surrogate": b"caf\xe9.txt".decode("utf-8", "surrogateescape"), "nul": "a\x00b"}.get(what, "")
    if kind == "metadata":
        metadata = current_job().metadata
        if what == "key":
            metadata[1] = "one"
        elif what == "deep":
            metadata["deep"] = deep(5000)
        else:
            metadata["name"] = odd
        return "ok"
    if kind == "error":
        raise Unprintable() if what == "unprintable" else ValueError(f"cannot read {odd}")
    return deep(5000) if what == "deep" else odd


@task(max_retries=1)
def unfinishable(trigger: str) -> object:
    return leave(trigger)
