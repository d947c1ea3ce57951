"""An encrypted job in the admin (docs/security.md): what a user sees of its sealed arguments, result,
metadata, error text and traceback. Without the permission ``queue_max_django.view_job_payload`` each reads
``(encrypted)``; with it the job's page offers to open them (``?decrypt=1``), and each such view is written
to the admin's log (``LogEntry``: "Recent actions" and the job's history). The same permission lets an
``args.NAME:VALUE`` or ``meta.KEY:VALUE`` search look into encrypted jobs (fieldsearch.py); tags, the task,
the queue and the state are never sealed, so lists and tag searches work for everyone."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from ..encryption.jobs import is_encrypted_job, masked, opened_job
from ..encryption.keys import EncryptionNotConfigured
from ..engine import Job
from ..engine.sealing import SealBroken

PERMISSION = "queue_max_django.view_job_payload"
DECRYPT = "decrypt"  # the query parameter of a job's page that opens its sealed data

__all__ = ["DECRYPT", "PERMISSION", "listed", "masked", "may_read", "opened", "shown"]


def may_read(request: HttpRequest) -> bool:
    return bool(request.user.has_perm(PERMISSION))


def listed(job: Job) -> Job:
    """A job as a list shows it: ``masked`` if it is encrypted (a list never opens one)."""
    return masked(job) if is_encrypted_job(job) else job


def opened(job: Job) -> Job | None:
    """``job`` opened, or None when this process cannot open it (no key)."""
    try:
        return opened_job(job)
    except (SealBroken, EncryptionNotConfigured, ValueError):
        return None


def shown(admin: Any, request: HttpRequest, job: Job) -> tuple[Job, dict[str, Any]]:
    """The job as ``request``'s user may see it, and what the page says of it (``encrypted``: whether it is;
    ``decrypted``: opened for this view; ``decrypt_url``: the link that opens it, for a user who may)."""
    if not is_encrypted_job(job):
        return job, {"encrypted": False}
    allowed = may_read(request)
    if allowed and request.GET.get(DECRYPT) == "1":
        found = opened(job)
        if found is not None:
            admin.log_change(request, admin.model(pk=job.job_id),
                             "Viewed its decrypted arguments, result, metadata and traceback.")  # fmt: skip
            return found, {"encrypted": True, "decrypted": True}
    url = f"{request.path}?{DECRYPT}=1" if allowed else None
    return masked(job), {"encrypted": True, "decrypted": False, "decrypt_url": url}
