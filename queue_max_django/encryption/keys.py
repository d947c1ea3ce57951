"""The ``Sealer`` of this process's ``QUEUE_MAX["ENCRYPTION_KEYS"]``, built once per set of keys."""

from __future__ import annotations

import threading
from typing import Any

from ..conf import get_config
from ..engine.sealing import Sealer

__all__ = ["EncryptionNotConfigured", "job_sealer", "sealer"]

_lock = threading.Lock()
_built: dict[tuple[tuple[str, bytes], ...], Sealer] = {}


class EncryptionNotConfigured(Exception):
    """A job is to be encrypted (``QUEUE_MAX["ENCRYPT"]``, ``@task(encrypt=True)``) or an encrypted one
    read, but ``QUEUE_MAX["ENCRYPTION_KEYS"]`` gives no key (check ``queue_max_django.E033``)."""


def sealer() -> Sealer | None:
    """The sealer of the configured keys, or None when there are none."""
    keys = get_config().encryption_keys
    if not keys:
        return None
    found = _built.get(keys)
    if found is None:
        with _lock:
            found = _built.get(keys)
            if found is None:
                if len(_built) > 8:
                    _built.clear()
                found = _built[keys] = Sealer(keys)
    return found


def required_sealer(what: str) -> Sealer:
    """``sealer()``, or ``EncryptionNotConfigured`` naming ``what`` needed it."""
    found = sealer()
    if found is None:
        raise EncryptionNotConfigured(
            f"{what} is encrypted but QUEUE_MAX['ENCRYPTION_KEYS'] gives no key (queue_max_django.E033): "
            f"nothing was stored"
        )
    return found


def job_sealer(task: Any) -> Sealer | None:
    """The sealer for the jobs of ``task`` (its ``encrypt``: True, False, or None for
    ``QUEUE_MAX["ENCRYPT"]``), or None when they are stored in clear."""
    encrypt = getattr(task, "encrypt", None)
    if encrypt is None:
        encrypt = get_config().encrypt
    if not encrypt:
        return None
    return required_sealer(f"task {getattr(task, 'name', task)!r}")
