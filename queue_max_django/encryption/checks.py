"""The checks of encryption's settings: ``QUEUE_MAX["ENCRYPT"]`` and ``["ENCRYPTION_KEYS"]`` and the tasks'
``encrypt=`` (ids E031 to E033, docs/reference/checks.md)."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

from ..conf.problems import PREFIX, Problem, _wrong_type
from ..engine.sealing import KeyProblem, parse_keys
from ..running.registry import registry

__all__ = ["encryption_problems", "encryption_task_problems"]

NEW_KEY = 'python -c "import base64, os; print(base64.urlsafe_b64encode(os.urandom(32)).decode())"'


def _have_cryptography() -> bool:
    return importlib.util.find_spec("cryptography") is not None


def encryption_problems(values: Mapping[str, Any]) -> list[Problem]:
    """E031: keys or ENCRYPT given without the ``[encryption]`` extra; E032: a malformed or short key;
    E033: ENCRYPT without keys. The key itself is never shown."""
    encrypt, keys = values["ENCRYPT"], values["ENCRYPTION_KEYS"]
    found: list[Problem] = []
    if not isinstance(encrypt, bool):
        found.append(_wrong_type(("ENCRYPT",), encrypt, "True or False"))
    if keys is not None:
        try:
            parse_keys(keys)
        except KeyProblem as exc:
            found.append(
                Problem(
                    f"{PREFIX}.E032",
                    f"QUEUE_MAX['ENCRYPTION_KEYS'] is not usable: {exc}.",
                    "Give a dict of key id -> key (the first one encrypts, all of them decrypt), or a list "
                    f"of keys, each 32 random bytes as base64. Make one with: {NEW_KEY}",
                )
            )
    elif encrypt is True:
        found.append(_no_key("QUEUE_MAX['ENCRYPT'] is True"))
    if (encrypt is True or keys is not None) and not _have_cryptography():
        found.append(_no_extra())
    return found


def encryption_task_problems(values: Mapping[str, Any]) -> list[Problem]:
    """E033 for each registered task with ``encrypt=True`` when there is no key (with keys, the settings'
    check says whether the extra is missing: E031)."""
    if values["ENCRYPTION_KEYS"] is not None:
        return []
    names = sorted(name for name in registry.names() if getattr(registry.get(name), "encrypt", None) is True)
    return [_no_key(f"the task {name!r} has encrypt=True") for name in names]


def _no_key(why: str) -> Problem:
    return Problem(
        f"{PREFIX}.E033",
        f"{why}, but QUEUE_MAX['ENCRYPTION_KEYS'] gives no key: its jobs cannot be stored.",
        f"Add QUEUE_MAX['ENCRYPTION_KEYS'] = {{'k1': '<key>'}} (read the key from the environment). Make a "
        f"key with: {NEW_KEY}",
    )


def _no_extra() -> Problem:
    return Problem(
        f"{PREFIX}.E031",
        "Encryption is configured but the cryptography package is not installed.",
        "Install the extra: pip install 'queue-max-django[encryption]'.",
    )
