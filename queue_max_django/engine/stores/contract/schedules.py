"""Schedules kept in the store, shared by every process (and machine) of a store: ``Store.schedules``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class ScheduleOps(Protocol):
    """The schedules of a store (``schedulestate``: what one is and how it is packed; the Django layer's
    ``scheduling`` package: how they are checked and ticked). A store only keeps bytes under names and
    changes one name in one transaction; what the bytes mean is the caller's. Names were checked by the
    caller (``schedulestate.check_name``): a store may assume them valid."""

    def change(self, name: str, edit: Callable[[bytes | None], bytes | None]) -> bytes | None:
        """In one transaction: read what is kept under ``name`` (None: nothing), call ``edit`` with it,
        and keep what it returns: bytes are written under ``name`` (a new name is added, a kept one
        replaced), None removes ``name`` (nothing to do where nothing was kept). -> what ``edit`` returned.
        ``edit`` may raise: then nothing is written and the exception propagates. [sc_schedule_change]
        Two changes of one name at once do not lose either: the second ``edit`` is given what the first
        wrote (a store serializes them, or runs the later one again). [sc_schedule_serial]"""

    def get(self, name: str) -> bytes | None:
        """What is kept under ``name``, None if nothing is. [sc_schedule_get]"""

    def all(self) -> list[tuple[str, bytes]]:
        """Every (name, bytes) kept, by name, as one consistent read. [sc_schedule_list]"""
