"""``Problem``: one mistake the system checks report (checks.py, postgres_checks.py), before it is a Django
``CheckMessage``. A leaf, so that both check modules can use it without importing each other."""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "queue_max_django"  # every check id starts with it: queue_max_django.E001 ...


@dataclass(frozen=True)
class Problem:
    """One mistake in the settings or the store they point at: a check id, what is wrong, how to fix it."""

    id: str
    msg: str
    hint: str

    @property
    def is_error(self) -> bool:
        return self.id.rpartition(".")[2].startswith("E")
