"""Bad input to the commands gets a clear error, and nothing is written: queue_enqueue checks every line of
a file as the engine will before it writes any, deep JSON and lone surrogates are bad lines (not
tracebacks), queue_worker refuses nan/inf/negative seconds and bad names; and names already stored with
control characters are printed escaped, never raw to the operator's terminal."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import transaction
from django.test import override_settings

from queue_max_django.conf import get_queue
from queue_max_django.engine import PayloadNotSerializable, codec
from queue_max_django.engine.jobspec import JobSpec
from tests.engine.locations import StoreLocation
from tests.testapp import tasks as t

Configure = Callable[..., override_settings]
ADD, RECORD = t.add.name, t.record_call.name


def call(*argv: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    call_command(*argv, stdout=out, stderr=err)
    assert err.getvalue() == ""
    return out.getvalue()


def write_lines(path: Path, *lines: Any) -> str:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return str(path)


def line(args: str, **options: str) -> str:
    """A line of a --file for record_call: ``args`` and each option's value as JSON text."""
    fields = {"task": f'"{RECORD}"', "args": args, **options}
    return "{" + ", ".join(f'"{key}": {value}' for key, value in fields.items()) + "}"


# Past msgpack's 1,024 levels: refused by the engine's check, or, on Python 3.11, whose json decoder stops at
# the interpreter's recursion limit (1,000), already when the line is decoded.
TOO_DEEP = (
    "cannot be stored: it is nested more than 1024 levels deep."
    if sys.version_info >= (3, 12)
    else "nested too deeply to decode: a job's arguments nest a few hundred levels at most"
)


def nested(levels: int) -> str:
    """A JSON list nested ``levels`` deep."""
    return "[" * levels + "]" * levels


# ------------------------------------------------------------------------------------ queue_enqueue


def test_five_good_lines_and_a_delay_past_the_year_9999_enqueue_nothing(
    queue_max: Configure, location: StoreLocation, tmp_path: Path
) -> None:
    """The line the engine would refuse at put time (it was refused after the five before it were
    stored) is found with the others, before anything is written: the store is not even opened."""
    good = [{"task": ADD, "args": [n, n]} for n in range(5)]
    path = write_lines(tmp_path / "jobs.jsonl", *good, {"task": ADD, "args": [1, 2], "delay": 1e300})
    with queue_max(), pytest.raises(CommandError) as caught:
        call("queue_enqueue", "--file", path)
    assert str(caught.value) == (
        f"{path}: 1 bad line, so nothing was enqueued:\n  line 6: delay 1e+300 s is past the year 9999"
    )
    assert not location.exists()
    with queue_max():
        assert get_queue().stats()["total"] == 0


@pytest.mark.parametrize(
    ("line", "error"),
    [
        (
            line('["a\\ud800b"]'),
            "payload['args'][0] cannot be stored: it is a str with a lone surrogate ('\\ud800' at position "
            "1), which has no UTF-8 encoding.",
        ),
        (
            line('[{"\\udc00": 1}]'),
            "payload['args'][0]['\\udc00'] cannot be stored: its key is a str with a lone surrogate",
        ),
        (
            line("[1]", queue='"a\\nb"'),
            "queue names cannot contain control characters or lone surrogates: 'a\\nb' has a control "
            "character ('\\n' at position 1)",
        ),
        (line("[1]", queue='"\\u001b[2J"'), "'\\x1b[2J' has a control character ('\\x1b' at position 0)"),
        (
            line(nested(100_000)),
            "nested too deeply to decode: a job's arguments nest a few hundred levels at most",
        ),
        # decodes (json goes past 1,000 levels from Python 3.12 on), but msgpack stores at most 1,024
        (line(f"[{nested(2000)}]"), TOO_DEEP),
        # 1,025 levels with the payload's own two: msgpack writes them and cannot read them back
        (line(f"[{nested(1023)}]"), TOO_DEEP),
        (line("[1]", delay="NaN"), "delay must be a number of seconds >= 0, not NaN"),
        (line("[1]", delay="-1e-9"), "delay must be a number of seconds >= 0, not -1e-09"),
        (line("[1]", delay="Infinity"), "delay must be a number of seconds >= 0, not Infinity"),
    ],
    ids=[
        "surrogate-value",
        "surrogate-key",
        "newline-queue",
        "escape-queue",
        "deep-100000",
        "deep-2000",
        "deep-1025",
        "nan",
        "negative",
        "inf",
    ],
)
def test_a_bad_line_is_named_and_nothing_is_enqueued(
    queue_max: Configure, location: StoreLocation, tmp_path: Path, line: str, error: str
) -> None:
    path = write_lines(tmp_path / "jobs.jsonl", {"task": ADD, "args": [1, 2]}, line)
    with queue_max(), pytest.raises(CommandError) as caught:
        call("queue_enqueue", "--file", path)
    message = str(caught.value)
    assert message.startswith(f"{path}: 1 bad line, so nothing was enqueued:\n  line 2: ")
    assert error in message
    assert message.isprintable() or set(message) - set(filter(str.isprintable, message)) == {"\n"}
    assert len(message) < 1000
    assert not location.exists()


@pytest.mark.skipif(
    sys.version_info < (3, 12),
    reason="Python 3.11's json decoder stops at the recursion limit "
    "(1,000 levels): such a line is refused as too deep to decode (tested above)",
)
def test_exactly_1024_levels_are_enqueued_and_read_back(queue_max: Configure, tmp_path: Path) -> None:
    path = write_lines(tmp_path / "jobs.jsonl", line(f"[{nested(1022)}]"))
    with queue_max():
        assert call("queue_enqueue", "--file", path).startswith("Enqueued 1 job")
        (job,) = get_queue().jobs("pending")
        assert job.payload["args"][0] == json.loads(nested(1022))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--args", nested(100_000)), "--args is nested too deeply to decode"),
        (("--kwargs", f'{{"a": {nested(100_000)}}}'), "--kwargs is nested too deeply to decode"),
        (("--args", "[1, 2]", "--delay", "1e300"), "delay 1e+300 s is past the year 9999"),
        (("--args", "[1, 2]", "--delay", "nan"), "delay must be a number of seconds >= 0, not NaN"),
        (("--args", "[1, 2]", "--queue", "a\x07b"), "'a\\x07b' has a control character ('\\x07' at"),
        (("--args", '["a\\udfff", 2]'), "payload['args'][0] cannot be stored: it is a str with a lone"),
    ],
)
def test_enqueue_options_that_the_engine_refuses(
    queue_max: Configure, location: StoreLocation, argv: tuple[str, ...], message: str
) -> None:
    with queue_max(), pytest.raises(CommandError) as caught:
        call("queue_enqueue", "--task", ADD, *argv)
    assert message in str(caught.value)
    assert len(str(caught.value)) < 1000
    assert not location.exists()


# ------------------------------------------------------------------------------------ queue_worker


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ("--shutdown-timeout", "nan"),
            "argument --shutdown-timeout: invalid non_negative_float value: 'nan'",
        ),
        (
            ("--shutdown-timeout", "inf"),
            "argument --shutdown-timeout: invalid non_negative_float value: 'inf'",
        ),
        (("--shutdown-timeout", "-1"), "argument --shutdown-timeout: invalid non_negative_float value: '-1'"),
        (("--burst-wait", "nan"), "argument --burst-wait: invalid non_negative_float value: 'nan'"),
        (("--burst-wait=-inf",), "argument --burst-wait: invalid non_negative_float value: '-inf'"),
        (("--shutdown-timeout", "1e300"), "--shutdown-timeout must be a number of seconds from 0 to "),
        (("--queue", "a\nb"), "--queue 'a\\nb': queue names cannot contain control characters"),
        (("--queue", "mail\x1b[0m"), "--queue 'mail\\x1b[0m': queue names cannot contain control"),
        (("--worker-id", "w\x1b]0;x\x07"), "--worker-id must be 1 to 150 characters without '/', control"),
    ],
)
def test_worker_options_that_cannot_work_are_refused_before_anything_starts(
    queue_max: Configure, location: StoreLocation, argv: tuple[str, ...], message: str
) -> None:
    with queue_max(), pytest.raises(CommandError) as caught:
        call("queue_worker", "--processes", "1", *argv)
    assert message in str(caught.value)
    assert not location.exists()  # no store opened, no worker registered


# ------------------------------------------------------------------------------------ printing names


BELL_QUEUE, ESCAPE_TASK = "q\x07bell", "t\x1b[2Jwipe"


def _stored_with_control_characters(queue_max: Configure) -> int:
    """A job whose queue and task names hold control characters, as a store written before names were
    checked may hold: put below the checks, through the store's own write (its protocol's ``put_one``)."""
    queue = get_queue()
    spec = JobSpec(BELL_QUEUE, ESCAPE_TASK, 0, None, 3, None, None)
    packed = codec.pack_value({"args": [], "kwargs": {}}, what="payload", limit=1 << 20)
    return queue._store.put_one(queue._clock(), 0, packed, spec)


def test_queue_list_and_queue_stats_print_stored_control_characters_escaped(queue_max: Configure) -> None:
    with queue_max():
        job_id = _stored_with_control_characters(queue_max)
        listing = call("queue_list", "--status", "pending")
        stats = call("queue_stats")
        as_json = json.loads(call("queue_list", "--status", "pending", "--json"))
    for text in (listing, stats):
        assert "\x07" not in text and "\x1b" not in text
    assert f"{job_id}  q\\x07bell  t\\x1b[2Jwipe" in listing
    assert "q\\x07bell" in stats
    # JSON escapes them its own way, and gives them back as they are
    assert (as_json["jobs"][0]["queue"], as_json["jobs"][0]["task"]) == (BELL_QUEUE, ESCAPE_TASK)


# ------------------------------------------------------------------------------------ .delay()


def test_delay_refuses_a_tuple_key_naming_the_argument(queue_max: Configure) -> None:
    """The job could never be read back (a tuple key is stored as a list): refused at .delay(), nothing
    stored."""
    with queue_max(), pytest.raises(PayloadNotSerializable) as caught:
        t.record_call.delay({(1, 2): "x"})
    assert str(caught.value).startswith(
        f"argument 'value' of task {RECORD!r} cannot be stored: dict is not msgpack data (value[(1, 2)]: its "
        f"key is a tuple, which msgpack stores as a list: that cannot be a key when the job is read back)."
    )
    with queue_max():
        assert get_queue().stats()["total"] == 0


@pytest.mark.django_db(transaction=True)
def test_delay_on_commit_refuses_a_tuple_key_at_the_call_not_at_the_commit(queue_max: Configure) -> None:
    with queue_max(ENQUEUE_ON_COMMIT=True):
        with transaction.atomic():
            with pytest.raises(PayloadNotSerializable, match=r"argument 'value'.*value\[\(1, 2\)\]: its key"):
                t.record_call.delay({(1, 2): "x"})
            t.record_call.delay({"1,2": "x"})
        assert get_queue().stats()["total"] == 1
