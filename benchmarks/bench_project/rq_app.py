"""RQ's side of benchmarks/peers_postgres.py: the no-op job function (RQ imports it by its dotted path)."""

from __future__ import annotations


def noop(*_args: object) -> None:
    return None
