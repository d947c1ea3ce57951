"""How deep a value nests, found without recursion: for data that a recursive walk (``json``, Django's
``normalize_json``, ``copy.deepcopy``) could not get through within Python's recursion limit, so that such
data is refused before a walk goes that deep."""

from __future__ import annotations

from typing import Any

CONTAINERS = (dict, list, tuple)


def depth(value: Any, stop_past: int) -> int:
    """How many dicts, lists and tuples deep ``value`` nests (a scalar: 0), counted no further than one past
    ``stop_past``. For acyclic data (JSON, msgpack data): a cycle counts as nesting past ``stop_past``."""
    if not isinstance(value, CONTAINERS):
        return 0
    deepest = 0
    todo = [(value, 1)]
    while todo:
        item, level = todo.pop()
        deepest = max(deepest, level)
        if level > stop_past:
            break
        children = item.values() if isinstance(item, dict) else item
        todo.extend((child, level + 1) for child in children if isinstance(child, CONTAINERS))
    return deepest
