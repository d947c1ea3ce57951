"""engine/nesting.py: how deep a value nests, counted without recursion (what refuses data that a recursive
walk could not get through: deep metadata, a django.tasks result too deep for ``normalize_json``)."""

from __future__ import annotations

import pytest

from queue_max_django.engine.nesting import depth


def nested(levels: int) -> object:
    value: object = "leaf"
    for level in range(levels):
        value = {"d": value} if level % 3 == 0 else [value] if level % 3 == 1 else (value,)
    return value


@pytest.mark.parametrize("value", [None, 0, "text", b"bytes", 1.5])
def test_a_scalar_nests_zero_levels(value: object) -> None:
    assert depth(value, 10) == 0


@pytest.mark.parametrize("levels", [1, 2, 3, 10, 64])
def test_dicts_lists_and_tuples_each_count_a_level(levels: int) -> None:
    assert depth(nested(levels), 100) == levels
    assert depth([nested(levels), 1, {"flat": 2}], 100) == levels + 1  # the deepest branch counts


def test_the_count_stops_one_past_the_bound_and_needs_no_recursion() -> None:
    """Far deeper than Python's recursion limit: counted by a loop, and only up to one past the bound."""
    assert depth(nested(100_000), 1024) == 1025
    assert depth(nested(1024), 1024) == 1024
