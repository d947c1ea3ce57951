"""``workflows.node_of``: how a finishing transaction finds the node of a job from its stored metadata bytes,
without decoding the JSON: the form ``node_metadata`` writes alone (a chord's members: read by slicing),
and any other metadata that holds the mark (read by the pattern)."""

from __future__ import annotations

import json

import pytest

from queue_max_django.engine import workflows as wf
from queue_max_django.engine.jobspec import JobSpec


def spec(metadata: bytes | None) -> JobSpec:
    return JobSpec("default", "t", 0, None, None, None, None, metadata)


@pytest.mark.parametrize(
    "own, expected",
    [
        (None, (1234567890123456, 4242)),  # the member of a chord: the mark alone
        (b'{"trace":"abc"}', (1234567890123456, 4242)),  # the task's own metadata beside it
        (b'{"note":"\\"_workflow\\":[7,8]"}', (1234567890123456, 4242)),  # a value that quotes the key
    ],
)
def test_the_node_of_what_node_metadata_wrote(own: bytes | None, expected: tuple[int, int]) -> None:
    stored = wf.node_metadata(spec(own), 1234567890123456, 4242)
    assert wf.node_of(stored) == expected
    assert wf.node_of(stored.decode()) == expected  # a store that keeps it as text
    assert json.loads(stored)[wf.WORKFLOW_KEY] == [1234567890123456, 4242]


@pytest.mark.parametrize(
    "stored, expected",
    [
        (b'{"_workflow":[5,0]}', (5, 0)),
        (b'{"_workflow": [5, 6]}', (5, 6)),  # spaced (JSON written by another encoder)
        (b'{"a":1,"_workflow":[5,6]}', (5, 6)),
        (b'{"_workflow":[5,-6]}', None),  # not two counts
        (b'{"_workflow":[5,x]}', None),
        (b'{"_workflow":[5,6,7]}', None),
        (b'{"_workflow":[,6]}', None),
        (b'{"_workflow":[]}', None),
        (b'{"note":"_workflow"}', None),  # the word, not the key
        (b'{"trace":"abc"}', None),
        (None, None),
    ],
)
def test_metadata_that_does_not_name_a_node_names_none(stored: bytes | None, expected: object) -> None:
    assert wf.node_of(stored) == expected
