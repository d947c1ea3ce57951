"""What a process holds open of a store, as the fork server asks before each fork (engine/forks.py): a
process with a store open is never forked to run workers (DESIGN.md)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from queue_max_django.engine import Queue
from queue_max_django.engine.forks import StoreOpenAtFork, open_stores, refuse_fork_with_store


def test_an_open_store_is_listed_and_refuses_a_fork_until_closed(make_queue: Callable[..., Queue]) -> None:
    before = Counter(open_stores())  # what other tests of this process left open, if anything
    queue = make_queue()
    queue.put({"n": 1})  # the PostgreSQL store connects on first use
    held = Counter(open_stores()) - before
    assert held, "the open store is not listed"
    with pytest.raises(StoreOpenAtFork, match="not forking a test: this process has a store open"):
        refuse_fork_with_store("a test")

    queue.close()

    assert Counter(open_stores()) - before == Counter()
