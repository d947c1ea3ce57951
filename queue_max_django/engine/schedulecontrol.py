"""``Queue``'s kept schedules: ``schedules``, ``schedule`` and ``change_schedule`` over the store's
(``Store.schedules``, ``stores/contract/schedules.py``). A base class of ``Queue``, which supplies
``_live()`` (the open store, checked against close and fork). What a schedule is: ``schedulestate``."""

from __future__ import annotations

from .schedulestate import Edit, StoredSchedule, check_name, editor, unpack
from .stores.base import Store


class ScheduleControl:
    """Schedules kept in the store, read and changed by every process and machine of the store."""

    def _live(self) -> Store:
        raise NotImplementedError  # Queue's

    def schedules(self) -> list[StoredSchedule]:
        """Every kept schedule, by name, as one consistent read (records that do not decode are left
        out: ``schedule_names`` lists them too)."""
        found = [unpack(name, raw) for name, raw in self._live().schedules.all()]
        return [schedule for schedule in found if schedule is not None]

    def schedule_names(self) -> list[str]:
        """The name of every kept record, those that do not decode as a schedule too."""
        return [name for name, _ in self._live().schedules.all()]

    def schedule(self, name: str) -> StoredSchedule | None:
        """The schedule kept under ``name``, or None."""
        raw = self._live().schedules.get(check_name(name))
        return None if raw is None else unpack(name, raw)

    def change_schedule(self, name: str, edit: Edit) -> StoredSchedule | None:
        """Change the schedule ``name`` in one transaction: ``edit`` is given the kept one (None: none)
        and returns the one to keep (None: remove it); it may raise (``ScheduleExists``,
        ``UnknownSchedule``...), and then nothing is written. ``changed_at`` (and ``created_at`` for a new
        one) are set from the store's clock. -> what is kept now."""
        store = self._live()
        raw = store.schedules.change(check_name(name), editor(name, edit, store.clock))
        return None if raw is None else unpack(name, raw)
