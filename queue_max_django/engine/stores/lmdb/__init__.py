"""The embedded LMDB store (``LmdbStore``, ``store.py``): a directory of shards, one LMDB environment each,
and a control environment shared by every process of the store.

Environments and their process-wide registry (``env.py``); the directory and ``store.json`` (``meta.py``);
the byte layout of keys (``keys.py``) and of the job record (``layout.py``); one shard's transactions
(``shard.py``: puts, claims and completions; ``upkeep.py``; ``reads.py``; ``manage.py``: requeue and
delete), with what they share (``access.py``, ``records.py``, ``quarantine.py``); flow-control and
coordination state (``control.py``, ``coordination.py``); waking consumers (``wake.py``); an environment's
last transaction id read from its meta pages (``metapages.py``); group commit (``groupcommit.py``) and
offline compaction (``compact.py``)."""
