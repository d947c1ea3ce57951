"""Encrypted jobs (issue 36), on every store: what an encrypted task's job stores is sealed (its arguments,
result, user metadata, error text and traceback), what stays clear (ids, name, queue, state, times, tags, the
error's type), the handle and the running task see it opened, and a job whose payload does not open is a
dead letter quarantined as corrupted while the others go on. Jobs run in-process (``run_queued``)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.checks import run_checks
from django.test import override_settings

from queue_max_django.conf import get_queue
from queue_max_django.encryption.jobs import SEALED_KEY
from queue_max_django.encryption.keys import EncryptionNotConfigured
from queue_max_django.engine import Job, State
from queue_max_django.engine.sealing import is_sealed, is_sealed_text, key_id_of
from queue_max_django.testing import run_queued
from tests.testapp import encrypted_tasks as et

pytest.importorskip("cryptography")

Configure = Callable[..., override_settings]
KEY_1 = base64.urlsafe_b64encode(bytes(range(32))).decode()
KEY_2 = base64.urlsafe_b64encode(bytes(range(100, 132))).decode()
SECRET = "4111-1111-SECRET"


@pytest.fixture(autouse=True)
def _encrypted_tasks() -> Iterator[None]:
    with et.registered():
        yield


def raw(job_id: int | None) -> Job:
    assert job_id is not None
    job = get_queue().job(job_id)
    assert job is not None
    return job


def test_put_stores_arguments_and_user_metadata_sealed(queue_max: Configure) -> None:
    with queue_max(ENCRYPTION_KEYS={"k1": KEY_1}):
        handle = et.charge.using(metadata={"customer": SECRET}).delay(SECRET, amount=3)
        job = raw(handle.job_id)
        assert is_sealed(job.payload) and key_id_of(job.payload) == "k1"
        assert SECRET not in repr(job)
        assert set(job.metadata) == {SEALED_KEY, "_tags"} and job.metadata["_tags"] == ["billing"]
        assert (job.name, job.queue, job.state) == (et.charge.name, "default", State.PENDING)
        assert handle.metadata == {"customer": SECRET}  # the handle opens it
        assert [j.job_id for j in get_queue().tagged("billing")] == [handle.job_id]  # tags stay clear


def test_success_stores_the_result_and_saved_metadata_sealed(queue_max: Configure) -> None:
    with queue_max(ENCRYPTION_KEYS={"k1": KEY_1}):
        handle = et.charge.using(metadata={"customer": "c1"}).delay(SECRET, amount=3)
        [outcome] = run_queued()
        assert outcome.state is State.DONE
        job = raw(handle.job_id)
        assert is_sealed(job.result) and SECRET not in repr(job)
        assert is_sealed_text(job.metadata[SEALED_KEY]) and "_tags" in job.metadata
        handle.refresh()
        assert handle.return_value == {"receipt": f"{SECRET}-receipt", "amount": 3}
        assert handle.metadata == {"customer": "c1", "charged": f"{SECRET}-done"}


def test_failure_stores_error_text_and_traceback_sealed_and_type_clear(queue_max: Configure) -> None:
    with queue_max(ENCRYPTION_KEYS={"k1": KEY_1}):
        handle = et.leak.delay(SECRET)
        [outcome] = run_queued()
        assert outcome.state is State.FAILED
        job = raw(handle.job_id)
        assert job.error_type == "ValueError"
        assert is_sealed_text(job.error) and is_sealed_text(job.traceback)
        assert all(is_sealed_text(text) for _kind, text in job.errors)
        assert SECRET not in repr(job)
        handle.refresh()
        [error] = handle.errors
        assert f"card {SECRET} was declined" in error.traceback


def test_encrypt_setting_covers_every_task_but_those_that_say_no(queue_max: Configure) -> None:
    with queue_max(ENCRYPT=True, ENCRYPTION_KEYS=[KEY_1]):
        sealed, clear = et.follows.delay(SECRET), et.clear.delay(SECRET)
        assert is_sealed(raw(sealed.job_id).payload)
        assert raw(clear.job_id).payload == {"args": [SECRET], "kwargs": {}}
        run_queued()
        sealed.refresh()
        assert sealed.return_value == SECRET and is_sealed(raw(sealed.job_id).result)


def test_map_seals_every_job(queue_max: Configure) -> None:
    with queue_max(ENCRYPTION_KEYS={"k1": KEY_1}):
        handles = et.charge.map([f"{SECRET}-{i}" for i in range(5)])
        assert all(is_sealed(raw(h.job_id).payload) for h in handles)
        run_queued()
        handles[3].refresh()
        assert handles[3].return_value["receipt"] == f"{SECRET}-3-receipt"


def test_using_encrypt_overrides_the_task_and_the_setting_for_that_copys_jobs(queue_max: Configure) -> None:
    with queue_max(ENCRYPT=True, ENCRYPTION_KEYS={"k1": KEY_1}):
        sealed = et.clear.using(encrypt=True).delay(SECRET)  # a task that says no, its copy yes
        clear = et.charge.using(encrypt=False).delay(SECRET, amount=2)  # a task that says yes, its copy no
        plain = et.clear.delay(SECRET)  # the task itself is as it was
        assert is_sealed(raw(sealed.job_id).payload) and key_id_of(raw(sealed.job_id).payload) == "k1"
        assert raw(clear.job_id).payload == {"args": [SECRET], "kwargs": {"amount": 2}}
        assert raw(plain.job_id).payload == {"args": [SECRET], "kwargs": {}}
        assert (et.clear.encrypt, et.charge.encrypt) == (False, True)
        run_queued()
        sealed.refresh()
        clear.refresh()
        assert sealed.return_value == SECRET and is_sealed(raw(sealed.job_id).result)  # its result sealed too
        assert clear.return_value["receipt"] == f"{SECRET}-receipt"
        assert raw(clear.job_id).result == {"receipt": f"{SECRET}-receipt", "amount": 2}


def test_using_encrypt_refuses_what_is_not_a_bool_and_a_copy_without_a_key(queue_max: Configure) -> None:
    with pytest.raises(ValueError, match="encrypt must be True, False or None, not 'yes'"):
        et.clear.using(encrypt="yes")  # type: ignore[arg-type]
    with queue_max():
        with pytest.raises(EncryptionNotConfigured, match="E033"):  # no key: refused, nothing stored
            et.clear.using(encrypt=True).delay(SECRET)
        assert get_queue().stats()["total"] == 0


def test_no_key_refuses_to_store(queue_max: Configure) -> None:
    with queue_max():
        with pytest.raises(EncryptionNotConfigured, match="E033"):
            et.charge.delay(SECRET)
        assert get_queue().stats()["total"] == 0


def test_old_key_still_opens_after_rotation(queue_max: Configure) -> None:
    with queue_max(ENCRYPTION_KEYS={"k1": KEY_1}):
        handle = et.charge.delay(SECRET)
    with queue_max(ENCRYPTION_KEYS={"k2": KEY_2, "k1": KEY_1}):
        [outcome] = run_queued()
        assert outcome.state is State.DONE
        job = raw(handle.job_id)
        assert key_id_of(job.payload) == "k1" and key_id_of(job.result) == "k2"


@pytest.mark.parametrize("keys", [{"k2": KEY_2}, {"k1": KEY_2}], ids=["key-removed", "does-not-verify"])
def test_a_payload_that_does_not_open_is_quarantined_and_others_go_on(
    queue_max: Configure, keys: dict[str, str]
) -> None:
    with queue_max(ENCRYPTION_KEYS={"k1": KEY_1}):
        lost = et.charge.delay(SECRET)
    with queue_max(ENCRYPTION_KEYS=keys):
        fine = et.charge.delay("other")
        outcomes = run_queued()
        assert {o.job_id: o.state for o in outcomes} == {lost.job_id: State.FAILED, fine.job_id: State.DONE}
        job = raw(lost.job_id)
        assert job.corrupted and job.error_type == "Corrupted"
        assert "does not open" in str(job.error) and SECRET not in repr(job)
        assert is_sealed(job.payload)  # kept as it was, for the key to be put back
        assert get_queue().delete(lost.job_id)


@pytest.mark.store_neutral  # settings only
@pytest.mark.parametrize(
    ("keys", "ids"),
    [
        ({"ENCRYPT": True}, ["queue_max_django.E033"]),
        ({"ENCRYPTION_KEYS": ["c2hvcnQ="]}, ["queue_max_django.E032"]),
        ({"ENCRYPTION_KEYS": {"bad id": KEY_1}}, ["queue_max_django.E032"]),
        ({"ENCRYPTION_KEYS": [KEY_1], "ENCRYPT": True}, []),
    ],
)
def test_checks(queue_max: Configure, keys: dict[str, Any], ids: list[str]) -> None:
    with queue_max(**keys):
        found = [m.id for m in run_checks() if m.id in {f"queue_max_django.E03{n}" for n in (1, 2, 3)}]
        assert sorted(set(found)) == ids


def test_a_chain_of_encrypted_steps_passes_results_on(queue_max: Configure) -> None:
    from queue_max_django import chain
    from tests.testapp import workflow_tasks as w

    with queue_max(ENCRYPT=True, ENCRYPTION_KEYS={"k1": KEY_1}):
        result = chain(w.wf_add.s(1, 2), w.wf_add.s(10)).delay()
        first = raw(int(result.nodes[0].job_id or 0))
        assert is_sealed(first.payload)
        run_queued()
        assert result.status == "succeeded"
        assert result.results == {"0": 3, "1": 13}
        assert is_sealed(raw(int(result.nodes[1].job_id or 0)).result)


def _command(*argv: str) -> str:
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command(*argv, stdout=out)
    return out.getvalue()


def test_queue_show_and_queue_list_decrypt_only_when_asked(queue_max: Configure) -> None:
    with queue_max(ENCRYPTION_KEYS={"k1": KEY_1}):
        done = et.charge.using(metadata={"customer": SECRET}).delay(SECRET)
        failed = et.leak.delay(SECRET)
        run_queued()
        waiting = et.charge.delay(SECRET)
        for job_id in (done.job_id, failed.job_id, waiting.job_id):
            for fmt in ((), ("--json",)):
                shown = _command("queue_show", str(job_id), *fmt)
                assert SECRET not in shown and "(encrypted)" in shown
                assert SECRET in _command("queue_show", str(job_id), "--decrypt", *fmt)
        for status in ("pending", "done", "failed"):
            assert SECRET not in _command("queue_list", "--status", status, "--json")
            assert SECRET in _command("queue_list", "--status", status, "--json", "--decrypt")
        assert SECRET not in _command("queue_list", "--tag", "billing", "--json")
        assert SECRET in _command("queue_list", "--tag", "billing", "--json", "--decrypt")
        where = ("queue_list", "--status", "pending", "--where", f"args.card:{SECRET}", "--json")
        assert json.loads(_command(*where))["count"] == 0  # a search cannot look into it
        found = json.loads(_command(*where, "--decrypt"))
        assert [job["job_id"] for job in found["jobs"]] == [str(waiting.job_id)]


def test_schedules_and_queue_enqueue_seal_the_jobs_they_put(queue_max: Configure) -> None:
    from queue_max_django.scheduling import editing
    from queue_max_django.scheduling.entries import ScheduleEntry

    with queue_max(ENCRYPTION_KEYS={"k1": KEY_1}):
        entry = ScheduleEntry(name="nightly", declared=True, task=et.charge.name, schedule=None, problem=None,
                              misfire_grace_time=0.0, coalesce=False, kept=None, args=[SECRET])  # fmt: skip
        ticked = raw(editing.enqueue(get_queue(), entry, unique_key=None))
        assert is_sealed(ticked.payload) and SECRET not in repr(ticked)
        out = _command("queue_enqueue", "--task", et.charge.name, "--args", json.dumps([SECRET]), "--json")
        [job_id] = json.loads(out)["job_ids"]
        enqueued = raw(int(job_id))
        assert is_sealed(enqueued.payload) and SECRET not in repr(enqueued)
        assert {o.state for o in run_queued()} == {State.DONE}


@pytest.mark.store_neutral  # settings only
def test_check_names_the_extra_when_cryptography_is_not_importable(
    queue_max: Configure, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "cryptography", None)  # what Python does for a package it cannot import
    with queue_max(ENCRYPTION_KEYS=[KEY_1]):
        [message] = [m for m in run_checks() if m.id == "queue_max_django.E031"]
        assert "queue-max-django[encryption]" in (message.hint or "")


def test_immediate_mode_stores_sealed_and_returns_opened(queue_max: Configure) -> None:
    with queue_max(ENCRYPTION_KEYS={"k1": KEY_1}, IMMEDIATE=True):
        handle = et.charge.delay(SECRET, amount=2)
        assert handle.return_value == {"receipt": f"{SECRET}-receipt", "amount": 2}
        failed = et.leak.delay(SECRET)
        assert failed.status == "FAILED" and f"card {SECRET} was declined" in failed.errors[-1].traceback
        for job in (raw(handle.job_id), raw(failed.job_id)):
            assert is_sealed(job.payload) and SECRET not in repr(job)
