"""The stores a ``Queue`` keeps its jobs in, behind one interface (``base.py``): the embedded LMDB store
(``lmdb/``), the default. The Queue is the policy; a store is the atomic operations on what is stored."""
