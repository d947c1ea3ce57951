"""The PostgreSQL store's tag indexes (schema version 11; ``tagged.py`` lists by them): a GIN index on each
job table's ``metadata -> '_tags'`` (engine/tags.py), created by ``schema.create`` (idempotent)."""

from __future__ import annotations

from ...tags import TAGS_KEY

# jsonb_path_ops: the smaller GIN opclass, which serves the ``@>`` the listing uses (and only that).
# Partial (``TAGGED``): a job without tags writes no entry (a GIN index holds a null entry for each row).
# fastupdate off: a put writes its entries in place, so a search never walks a pending list of recent ones.
TAGGED = f"metadata ? '{TAGS_KEY}'"
TAGS_DDL = "".join(
    f"CREATE INDEX IF NOT EXISTS {table}_tags ON {table} "
    f"USING gin ((metadata -> '{TAGS_KEY}') jsonb_path_ops) WITH (fastupdate = off) WHERE {TAGGED};"
    for table in ("qm_jobs", "qm_finished")
)
