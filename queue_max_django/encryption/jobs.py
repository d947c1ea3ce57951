"""Where an encrypted job's data crosses into the store and back, each in one function.

Put: ``seal_put``/``seal_puts`` seal the payload (``{"args": ..., "kwargs": ...}`` as one sealed msgpack
value) and the user's metadata (every key that does not start with ``_``, as one sealed JSON text under
``SEALED_KEY``). The ``_`` keys stay clear: they are the store's and the backend's (``_tags``, ``_cancel``,
``_workflow``, ``_unique``, ``_schedule``, ``_trace``), read by the store itself (tags, limits, workflows)
and by the admin's lists.

Run: a job is encrypted when its payload is sealed (``is_encrypted``). The runner opens the payload
(``open_payload``; one that does not open makes the job a dead letter with the error type ``Corrupted``:
``corrupted``), packs the result sealed (``pack_result``), and the completer seals the error text and
traceback of a failed attempt (``sealed_error``). The worker's log line of a failed encrypted job names the
exception's type only (``loggable_error``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ..engine import Job, codec
from ..engine.job import CORRUPTED
from ..engine.sealing import METADATA_KEY, SealBroken, Sealer, is_sealed, is_sealed_text
from ..engine.validate import DescribedError, describe_error
from .keys import job_sealer, required_sealer, sealer

__all__ = [
    "ENCRYPTED",
    "SEALED_KEY",
    "corrupted",
    "is_encrypted",
    "loggable_error",
    "masked",
    "open_metadata",
    "open_payload",
    "open_result",
    "open_text",
    "pack_result",
    "readable",
    "seal_metadata",
    "seal_put",
    "seal_puts",
    "sealed_error",
]

SEALED_KEY = METADATA_KEY  # in an encrypted job's metadata: the user's keys, sealed JSON text
ENCRYPTED = "(encrypted)"  # what is shown in place of what a reader may not open


def is_encrypted(payload: Any) -> bool:
    """Whether a job with this (stored) payload is encrypted."""
    return is_sealed(payload)


# ---------------------------------------------------------------------- put


def seal_metadata(found: Sealer, metadata: dict[str, Any] | None) -> dict[str, Any] | None:
    """``metadata`` with its user keys (not ``_`` first) sealed under ``SEALED_KEY``; the ``_`` keys clear."""
    if not metadata:
        return metadata
    user = {key: value for key, value in metadata.items() if not key.startswith("_")}
    if not user:
        return metadata
    kept = {key: value for key, value in metadata.items() if key.startswith("_") and key != SEALED_KEY}
    text = json.dumps(user, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    return {**kept, SEALED_KEY: found.seal_text(text, "metadata")}


def _seal_payload(found: Sealer, payload: Any, limit: int) -> Any:
    return found.seal_value(codec.pack_value(payload, what="payload", limit=limit), "payload")


def seal_put(task: Any, payload: Any, options: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """(payload, put options) of one job of ``task`` as they are stored: sealed if its jobs are encrypted."""
    found = job_sealer(task)
    if found is None:
        return payload, options
    from ..conf import get_config

    sealed = _seal_payload(found, payload, get_config().max_payload_bytes)
    return sealed, {**options, "metadata": seal_metadata(found, options.get("metadata"))}


def seal_puts(
    task: Any, payloads: Iterable[Any], options: dict[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    """``seal_put`` of many jobs sharing their options."""
    found = job_sealer(task)
    if found is None:
        return list(payloads), options
    from ..conf import get_config

    limit = get_config().max_payload_bytes
    sealed = [_seal_payload(found, payload, limit) for payload in payloads]
    return sealed, {**options, "metadata": seal_metadata(found, options.get("metadata"))}


# ---------------------------------------------------------------------- run


def open_payload(payload: Any) -> Any:
    """A stored payload opened (as it is when not sealed); ``SealBroken`` when it does not open, and
    ``EncryptionNotConfigured`` when this process has no key."""
    if not is_sealed(payload):
        return payload
    return required_sealer("a stored job").open_value(payload, "payload")


def open_result(result: Any) -> Any:
    """A stored result opened (as it is when not sealed); ``SealBroken`` when it does not open."""
    if not is_sealed(result):
        return result
    return required_sealer("a stored result").open_value(result, "result")


def open_text(text: Any, what: str) -> Any:
    """A stored error text or traceback opened (as it is when not sealed)."""
    if not is_sealed_text(text):
        return text
    return required_sealer(f"a stored {what}").open_text(text, what)


def open_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """Stored metadata with its sealed user keys opened (as it is when it has none)."""
    text = metadata.get(SEALED_KEY)
    if text is None:
        return metadata
    user = json.loads(required_sealer("a stored job's metadata").open_text(text, "metadata"))
    return {**user, **{key: value for key, value in metadata.items() if key != SEALED_KEY}}


def pack_result(record: Any, result: Any) -> bytes | None:
    """``result`` of the job ``record`` holds as it is stored: sealed if the job is encrypted."""
    if result is None:
        return None
    data = record.pack_result(result)
    if not is_sealed(record.payload):
        return data  # type: ignore[no-any-return]
    limit = 1 << 62  # checked above, unsealed; the seal adds a fixed 30 to 60 bytes
    return codec.pack_value(
        required_sealer("a result").seal_value(data, "result"), what="result", limit=limit
    )


def sealed_error(record: Any, error: BaseException | str | None) -> BaseException | str | None:
    """The error of a failed attempt of ``record``'s job as the store gets it: its text and traceback sealed
    (its type clear) if the job is encrypted; as it is otherwise."""
    if error is None or type(error) is DescribedError or not is_sealed(record.payload):
        return error
    found = sealer()
    if found is None:
        return error
    text, kind, trace = describe_error(error)
    return DescribedError(
        found.seal_text(text, "error"), kind, None if trace is None else found.seal_text(trace, "traceback")
    )


def corrupted(job_id: int, exc: Exception) -> DescribedError:
    """The error of a job whose sealed payload does not open: a dead letter quarantined as corrupted."""
    return DescribedError(f"job {job_id}: its encrypted payload does not open: {exc}", CORRUPTED, None)


def loggable_error(payload: Any, error: Any) -> Any:
    """What the worker may log of ``error`` (a failed attempt's) of a job with ``payload``: as it is, but
    for an encrypted job only the exception's type (its text and traceback may hold its arguments)."""
    if not is_sealed(payload) or error is None or isinstance(error, str):
        return error if not is_sealed(payload) or error is None else "(encrypted)"
    if type(error) is DescribedError:
        return error.parts[0] if error.parts[1] == CORRUPTED else f"{error.parts[1]} {ENCRYPTED}"
    kind = type(error)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    return f"{name} (its message and traceback are encrypted in the store)"


def is_broken(exc: BaseException) -> bool:
    return isinstance(exc, SealBroken)


def check_encrypt(encrypt: Any) -> bool | None:
    """``@task(encrypt=...)``: True, False, or None (``QUEUE_MAX["ENCRYPT"]`` decides)."""
    if encrypt is not None and not isinstance(encrypt, bool):
        raise ValueError(f"encrypt must be True, False or None, not {encrypt!r}")
    return encrypt


def is_encrypted_job(job: Any) -> bool:
    """Whether the stored ``job`` (a ``Job``) holds sealed data."""
    return (
        is_sealed(job.payload)
        or is_sealed(job.result)
        or SEALED_KEY in job.metadata
        or is_sealed_text(job.error)
    )


def opened_job(job: Job) -> Job:
    """``job`` (a ``Job`` snapshot) with what is sealed in it opened: as it is when nothing is. A part that
    does not open (``SealBroken``) is left sealed, and ``damage`` says why."""
    if not is_encrypted_job(job):
        return job
    import dataclasses

    damage: list[str] = [job.damage] if job.damage else []

    def attempt(opener: Any, value: Any, *what: str) -> Any:
        try:
            return opener(value, *what)
        except SealBroken as exc:
            damage.append(f"job {job.job_id}: {exc}")
            return value

    def metadata(value: Any) -> Any:
        return open_metadata(value)

    errors = tuple((kind, attempt(open_text, text, "error")) for kind, text in job.errors)
    return dataclasses.replace(
        job,
        payload=attempt(lambda value: open_payload(value), job.payload),
        result=attempt(lambda value: open_result(value), job.result),
        error=attempt(open_text, job.error, "error"),
        traceback=attempt(open_text, job.traceback, "traceback"),
        errors=errors,
        metadata=attempt(metadata, job.metadata),
        damage="; ".join(damage) or None,
    )


def seal_saved_metadata(record: Any, metadata: dict[str, Any]) -> dict[str, Any]:
    """Metadata a running job saves, as it is stored: its user keys sealed if the job is encrypted."""
    if not is_sealed(record.payload):
        return metadata
    return seal_metadata(required_sealer("a job's metadata"), metadata) or {}


def masked(job: Job) -> Job:
    """``job`` with each sealed part shown as ``(encrypted)``; its clear metadata keys kept."""
    import dataclasses

    def text(value: Any) -> Any:
        return ENCRYPTED if is_sealed_text(value) else value

    metadata = {key: (ENCRYPTED if key == SEALED_KEY else value) for key, value in job.metadata.items()}
    return dataclasses.replace(
        job,
        payload=ENCRYPTED if is_sealed(job.payload) else job.payload,
        result=ENCRYPTED if is_sealed(job.result) else job.result,
        error=text(job.error),
        traceback=text(job.traceback),
        errors=tuple((kind, text(message)) for kind, message in job.errors),
        metadata=metadata,
    )


def readable(job: Job, decrypt: bool) -> Job:
    """``job`` as a command prints it: opened with ``decrypt`` (what does not open still masked), else
    ``masked``. ``EncryptionNotConfigured`` to decrypt without a key."""
    if not is_encrypted_job(job):
        return job
    return masked(opened_job(job) if decrypt else job)
