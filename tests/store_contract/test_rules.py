"""The suite covers the contract: every rule id ``[sc_...]`` of ``engine/stores/base.py`` and
``engine/stores/contract/`` is the marker of at least one test of this folder (and ``--strict-markers``
refuses any id that is not there)."""

from __future__ import annotations

import pathlib
import re

from tests.contracts import STORE_RULES


def test_every_rule_of_the_store_contract_has_a_test() -> None:
    folder = pathlib.Path(__file__).parent
    marked = set()
    for path in folder.glob("test_*.py"):
        marked.update(re.findall(r"@pytest\.mark\.(sc_[a-z0-9_]+)", path.read_text()))
    assert len(STORE_RULES) > 50
    assert sorted(set(STORE_RULES) - marked) == []
