"""The LMDB store (``STORE = "lmdb"``, the default), its Django side: ``KIND``, this kind of store in
``STORE_KINDS``. The store lives in the directory ``DATA_DIR`` (``BASE_DIR / "queue_max_data"`` when unset),
which the checks look at on disk (E008 to E012, W002) without creating anything.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ...engine import Queue
from ...engine.stores.lmdb.store import LmdbStore
from ..defaults import resolve_data_dir
from ..problems import PREFIX, Problem, _wrong_type
from .kind import QueueMaxConfig, StoreKind

KEYS = ("DATA_DIR", "SHARDS", "SYNC")  # only say where and how to open an LMDB store


def _data_dir_problems(value: Any, base_dir: Any) -> list[Problem]:
    if value is not None and (
        not isinstance(value, (str, os.PathLike))
        or not isinstance(os.fspath(value), str)
        or not os.fspath(value).strip()  # "" is what an unset environment variable gives
        or "\x00" in os.fspath(value)
    ):
        return [_wrong_type(("DATA_DIR",), value, "a path (a non-empty str or a pathlib.Path)")]
    path = resolve_data_dir(value, base_dir)
    if path is None:
        return [
            Problem(
                f"{PREFIX}.E008",
                "QUEUE_MAX['DATA_DIR'] is not set and the settings have no BASE_DIR to put it under.",
                "Set QUEUE_MAX['DATA_DIR'] to the directory of the job store (an absolute path), or set "
                "BASE_DIR.",
            )
        ]
    if not path.is_absolute():
        return [
            Problem(
                f"{PREFIX}.W002",
                f"QUEUE_MAX['DATA_DIR'] is a relative path ({os.fspath(path)!r}): each process would open "
                f"the store under its own working directory.",
                "Use an absolute path, such as BASE_DIR / 'queue_max_data'.",
            )
        ]
    return []


def store_problems(data_dir: Path, shards: int | None) -> list[Problem]:
    """What stands between ``data_dir`` and a store the engine can open with ``shards``. Creates nothing."""
    if data_dir.exists() and not data_dir.is_dir():
        return [
            Problem(
                f"{PREFIX}.E009",
                f"QUEUE_MAX['DATA_DIR'] ({os.fspath(data_dir)!r}) exists and is not a directory.",
                "Point DATA_DIR at a directory (it is created if missing), or move that file away.",
            )
        ]
    existing = data_dir.absolute()
    while not existing.exists():
        existing = existing.parent
    if not os.access(existing, os.R_OK | os.W_OK | os.X_OK):
        return [
            Problem(
                f"{PREFIX}.E010",
                f"QUEUE_MAX['DATA_DIR'] ({os.fspath(data_dir)!r}) is not writable: this process lacks read, "
                f"write or search permission on {os.fspath(existing)!r}.",
                "Give the user that runs Django and the workers write access there, or choose another "
                "DATA_DIR.",
            )
        ]
    problem = LmdbStore.unopenable(os.fspath(data_dir), shards)
    if problem is None:
        return []
    if problem.foreign is not None:
        return [_not_our_store(data_dir, problem.foreign)]
    if problem.shards_on_disk is not None:
        on_disk = problem.shards_on_disk
        return [
            Problem(
                f"{PREFIX}.E011",
                f"QUEUE_MAX['SHARDS'] is {shards}, but the store at {os.fspath(data_dir)!r} has "
                f"{on_disk} shards.",
                f"Set SHARDS to {on_disk} or None (the count on disk). To change the shard count, drain "
                f"this store and point DATA_DIR at a new directory.",
            )
        ]
    return []


def _not_our_store(data_dir: Path, reason: str) -> Problem:
    return Problem(
        f"{PREFIX}.E012",
        f"QUEUE_MAX['DATA_DIR'] ({os.fspath(data_dir)!r}) holds a store this version cannot open: "
        f"{reason.rstrip('.')}.",
        "Point DATA_DIR at an empty or new directory, or drain the old store with the version that wrote it.",
    )


def foreign_key(key: str, kind: str) -> Problem:
    return Problem(
        f"{PREFIX}.E017",
        f"QUEUE_MAX[{key!r}] is for the LMDB store, but QUEUE_MAX['STORE'] is {kind!r}.",
        f"Remove {key}: the PostgreSQL store keeps its jobs in the database that DATABASE or URL names, "
        f"and DATA_DIR, SHARDS and SYNC do not apply to it (its durability is PostgreSQL's "
        f"synchronous_commit).",
    )


def value_problems(values: Mapping[str, Any], base_dir: Any, found: list[Problem]) -> list[Problem]:
    return found + _data_dir_problems(values["DATA_DIR"], base_dir)


def _store_problems(values: Mapping[str, Any], base_dir: Any) -> list[Problem]:
    data_dir = resolve_data_dir(values["DATA_DIR"], base_dir)
    assert data_dir is not None  # E008 otherwise
    return store_problems(data_dir, values["SHARDS"])


def config(values: Mapping[str, Any], base_dir: Any) -> dict[str, Any]:
    data_dir = resolve_data_dir(values["DATA_DIR"], base_dir)
    assert data_dir is not None  # settings_problems reported E008 otherwise
    return {"data_dir": data_dir}


def open_queue(
    config: QueueMaxConfig, options: dict[str, Any], close: Callable[[], None]
) -> tuple[Queue, None]:
    assert config.data_dir is not None
    return Queue(config.data_dir, shards=config.shards, sync=config.sync, **options), None


def missing(config: QueueMaxConfig) -> str | None:
    if config.data_dir is None or LmdbStore.exists(config.data_dir):
        return None
    return (
        f"no store at {config.data_dir}: nothing was created. Check QUEUE_MAX['DATA_DIR'] (a "
        f"store restored to another path? a volume not mounted?); `queue_worker` and the "
        f"commands that write make a new store."
    )


KIND = StoreKind(
    name="lmdb",
    summary="'lmdb' (the embedded store in DATA_DIR, the default)",
    keys=KEYS,
    value_problems=value_problems,
    foreign_key=foreign_key,
    store_problems=_store_problems,
    config=config,
    store_class=lambda: LmdbStore,
    open=open_queue,
    missing=missing,
    caller_connection=lambda config: None,  # its puts never join a database transaction
    callers_alias=lambda config: None,
)
