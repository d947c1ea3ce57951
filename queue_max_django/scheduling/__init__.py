"""Schedules kept in the store beside the ones declared in code: one list of both (``entries.py``), their
changes checked against the registered tasks before anything is written (``editing.py``), and what the
worker's scheduler ticks (``ticking.py``). The admin's Schedules page and ``manage.py queue_schedule`` use
``entries`` and ``editing``; the engine keeps the records (``engine/schedulestate.py``)."""
