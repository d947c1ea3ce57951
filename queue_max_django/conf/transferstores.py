"""The stores ``manage.py queue_transfer`` moves between, by name: ``default`` is this process's
``QUEUE_MAX`` store (``get_queue()``); any other name is a key of the ``QUEUE_MAX_TRANSFER`` setting, whose
value is a ``QUEUE_MAX``-like dict (``STORE`` and where the store is: ``DATA_DIR`` and ``SHARDS``, or
``DATABASE``/``URL``), checked as ``QUEUE_MAX`` is, and opened without the settings' rate limits (the move
carries the source's)."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from ..engine import Queue
from . import build_config, get_queue
from .defaults import read_settings
from .storekinds import STORE_KINDS

DEFAULT_NAME = "default"
SETTING = "QUEUE_MAX_TRANSFER"


def names() -> list[str]:
    """Every name a store can be given by: ``default`` and the keys of ``QUEUE_MAX_TRANSFER``."""
    named = getattr(settings, SETTING, {}) or {}
    return [DEFAULT_NAME, *sorted(str(key) for key in named if key != DEFAULT_NAME)]


def open_named(name: str, *, source: bool) -> Queue:
    """The ``Queue`` of the store named ``name``. ``ImproperlyConfigured`` for an unknown name or settings
    that do not check; a source whose LMDB directory holds no store is refused (opening would make one)."""
    if name == DEFAULT_NAME:
        return get_queue(create=not source)
    named = getattr(settings, SETTING, {}) or {}
    if not isinstance(named, Mapping) or name not in named:
        raise ImproperlyConfigured(
            f"no store is named {name!r}: the names are {', '.join(names())} ('default' is QUEUE_MAX; the "
            f"others are keys of the {SETTING} setting, each a QUEUE_MAX-like dict)"
        )
    raw = named[name]
    if not isinstance(raw, Mapping):
        raise ImproperlyConfigured(f"{SETTING}[{name!r}] must be a dict like QUEUE_MAX, not {raw!r}")
    try:
        config = build_config(raw, read_settings()[1])
    except ImproperlyConfigured as exc:
        raise ImproperlyConfigured(str(exc).replace("QUEUE_MAX is", f"{SETTING}[{name!r}] is", 1)) from None
    kind = STORE_KINDS[config.store]
    missing = kind.missing(config) if source else None
    if missing is not None:
        raise ImproperlyConfigured(f"{SETTING}[{name!r}]: {missing}")
    options: dict[str, Any] = {
        "lease_time": config.lease_time,
        "result_ttl": config.result_ttl,
        "worker_id": f"{socket.gethostname()}:{os.getpid()}",
    }
    queue, _joined = kind.open(config, options, lambda: None)
    return queue
