"""The embedded LMDB store: a directory of shards, one LMDB environment each, plus a control environment
shared by every process. Environments and their registry (``env.py``), the directory and ``store.json``
(``meta.py``), the byte layout of keys (``keys.py``) and records (``layout.py``), one shard's transactions
(``shard.py``, ``reads.py``, ``upkeep.py``), flow control and coordination state (``control.py``,
``coordination.py``), waking consumers (``wake.py``), group commit and offline compaction."""
