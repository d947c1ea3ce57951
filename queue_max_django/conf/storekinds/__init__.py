"""The Django side of each kind of store, behind one registry: ``STORE_KINDS``, ``QUEUE_MAX["STORE"]`` ->
its ``StoreKind``.

The engine opens a store (``engine/stores/``); a kind here says what the Django layer needs besides: which
``QUEUE_MAX`` keys are its own and what is wrong with their values or with the store they point at (the
system checks), the fields of the config they make, how to open its ``Queue``, and whether a job put now
joins the caller's transaction. ``conf`` and ``conf/checks.py`` ask the kind the settings name and know no
kind by name. A new kind is one module (or package) here and one line in ``STORE_KINDS``.

- ``kind.py``: ``StoreKind``, what each kind provides.
- ``lmdb.py``: the embedded store in ``DATA_DIR`` (the default).
- ``postgresql/``: the PostgreSQL store in a ``DATABASES`` alias or at a ``URL``: its settings
  (``config.py``), the alias's connection (``database.py``), its checks (``checks.py``) and its tables
  (``tables.py``, made and upgraded by ``migrate``).
"""

from __future__ import annotations

from collections.abc import Mapping

from . import lmdb, postgresql
from .kind import StoreKind

STORE_KINDS: Mapping[str, StoreKind] = {kind.name: kind for kind in (lmdb.KIND, postgresql.KIND)}
