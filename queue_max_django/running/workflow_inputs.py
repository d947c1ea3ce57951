"""What a workflow's step made with ``.s()`` receives from its parents: the worker, as it starts the job,
reads their results from the workflow (where the store keeps them for as long as the workflow is kept,
whatever ``RESULT_TTL`` does to the parents' jobs) and puts them first among the arguments.

A step's payload says which (``AFTER_KEY``): ``[shape, [parent node indexes], [parent names]]``, the shape
being ``"one"`` (a chain's previous step, or a graph node's only parent: its result), ``"list"`` (after a
group: the list of the group's results, in its order; a chord's callback) or ``"dict"`` (a graph node with
several parents: ``{name: result}``).
"""

from __future__ import annotations

from typing import Any

from ..encryption.jobs import open_result
from ..engine.workflows import WORKFLOW_KEY

AFTER_KEY = "after"  # in a step's payload, beside "args" and "kwargs"
SHAPES = ("one", "list", "dict")


class ParentResultsMissing(LookupError):
    """The job is a workflow step that takes its parents' results, but its metadata does not name its
    workflow (it was copied out of one): it cannot run as it was meant to."""


def with_parents(payload: dict[str, Any], metadata: dict[str, Any], owner: Any) -> dict[str, Any]:
    """``payload`` (a step's: it has ``AFTER_KEY``) as the call it stands for: ``{"args": [the parents'
    results, *args], "kwargs": ...}``. ``owner``: the
    record's owner (``Record._owner``, a Queue's consumer).
    ``ParentResultsMissing`` when the job names no workflow; ``ValueError`` for a malformed step."""
    after = payload.get(AFTER_KEY)
    link = metadata.get(WORKFLOW_KEY)
    if not (isinstance(after, list) and len(after) == 3 and after[0] in SHAPES):
        raise ValueError(f"the {AFTER_KEY!r} of a workflow step is malformed: {after!r:.200}")
    if not (isinstance(link, list) and len(link) == 2):
        raise ParentResultsMissing("the job takes its parents' results but is not a node of a workflow")
    shape, indexes, names = after
    # A workflow is forgotten only once every node ended, so a node's job that runs finds it (a dead letter
    # requeued alone after that finds None for each parent: its results went with the workflow).
    while not hasattr(owner, "workflows"):  # the record's owner is its Queue's consumer: up to the Queue
        owner = owner._owner
    values = [open_result(value) for value in owner.workflows.results(link[0], indexes)]  # opened if sealed
    if shape == "one":
        first: Any = values[0]
    elif shape == "list":
        first = values
    else:
        first = dict(zip(names, values, strict=True))
    call = {key: value for key, value in payload.items() if key != AFTER_KEY}
    call["args"] = [first, *call.get("args", [])]
    return call
