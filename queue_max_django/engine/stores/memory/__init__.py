"""The in-memory reference store (``MemoryStore``, ``store.py``): the store contract of ``stores/base.py``
met with plain Python structures under one lock, in one process, kept nowhere.

It is the proof that ``base.py`` says enough to write a store from it (huey's ``MemoryStorage`` plays the
same part), and the store of fast unit tests that need no files: ``Queue("memory://name")`` opens the named
store ``name`` of this process (every Queue of one name shares it, as every Queue of one LMDB directory
shares that store), ``Queue("memory://")`` a store of its own. It is not for production: nothing survives
the process, and no other process sees it.

The data and its lock (``space.py``); claims and the holder's operations (``claims.py``); upkeep and
management (``upkeep.py``); reads (``reads.py``); limits, breakers, locks and workers (``control.py``);
waking consumers (``hints.py``)."""

from .store import MemoryStore

__all__ = ["MemoryStore"]
