"""Every system check id against its exact output (docs/reference/checks.md), and the app's start-up."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.core import checks
from django.core.checks import Error, Warning
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings
from django.test.utils import override_system_checks

from queue_max_django import apps as app_module
from queue_max_django.conf import get_queue
from queue_max_django.conf.checks import TAG, check_settings
from queue_max_django.engine import Queue
from queue_max_django.periodic import periodic_task
from queue_max_django.tasks import registry, task

Configure = Callable[..., override_settings]
ROOT = Path(__file__).resolve().parents[2]

# The checks of the settings read the settings, and of a store only the LMDB store's data directory; the
# PostgreSQL store's own checks (its keys, its database, its schema) are test_pg_checks.py's.
pytestmark = pytest.mark.store_neutral


def run(configure: Configure, **keys: Any) -> list[checks.CheckMessage]:
    with configure(**keys):
        return check_settings()


def e003(path: str, value: str, expected: str, default: str) -> Error:
    return Error(
        f"{path} must be {expected}, not {value}.",
        hint=f"Set {path} to {expected}, or remove it to use the default ({default}).",
        id="queue_max_django.E003",
    )


def e004(path: str, span: str, value: str, default: str) -> Error:
    return Error(
        f"{path} must be {span}, not {value}.",
        hint=f"Set {path} to a value in that range, or remove it to use the default ({default}).",
        id="queue_max_django.E004",
    )


def test_valid_settings_give_no_message(queue_max: Configure) -> None:
    everything = {
        "SHARDS": 4,
        "LEASE_TIME": 10,
        "MAX_RETRIES": 0,
        "RETRY_BACKOFF": 0,
        "RETRY_BACKOFF_MAX": 60.5,
        "RESULT_TTL": 3600,
        "MAX_PAYLOAD_BYTES": 4096,
        "SYNC": True,
        "QUEUES": ["default", "emails"],
        "RATE_LIMIT": "1000/s",
        "QUEUE_RATE_LIMITS": {"emails": 160},
        "CIRCUIT_BREAKER": {"THRESHOLD": 1, "TIMEOUT": 0.5},
        "ALERT_THRESHOLD": 0,
        "TIMEOUT": 300,
        "IMMEDIATE": True,
        "ENQUEUE_ON_COMMIT": True,
        "UNKNOWN_TASK_GRACE": 0,
        "WORKER": {
            "PROCESSES": 2,
            "THREADS": 8,
            "QUEUES": ("emails",),
            "SHUTDOWN_TIMEOUT": 5,
            "MAX_JOBS": 1000,
            "MAX_MEMORY_MB": 512,
            "BURST_WAIT": 1.5,
        },
    }
    assert run(queue_max, **everything) == []


def test_e001_queue_max_not_a_dict() -> None:
    with override_settings(QUEUE_MAX=["DATA_DIR"]):
        assert check_settings() == [
            Error(
                "QUEUE_MAX must be a dict, not list.",
                hint="Set QUEUE_MAX to a dict of the keys in docs/reference/settings.md, or remove it to use "
                "the defaults.",
                id="queue_max_django.E001",
            )
        ]


@pytest.mark.parametrize(
    ("keys", "message", "advice"),
    [
        ({"LEASE_TIM": 5}, "QUEUE_MAX has an unknown key 'LEASE_TIM'.", "Did you mean 'LEASE_TIME'? "),
        ({"lease_time": 5}, "QUEUE_MAX has an unknown key 'lease_time'.", "Did you mean 'LEASE_TIME'? "),
        ({"BROKER_URL": "redis://"}, "QUEUE_MAX has an unknown key 'BROKER_URL'.", ""),
        (
            {"WORKER": {"THREAD": 2}},
            "QUEUE_MAX['WORKER'] has an unknown key 'THREAD'.",
            "Did you mean 'THREADS'? ",
        ),
        (
            {"CIRCUIT_BREAKER": {"RECOVERY_TIMEOUT": 5}},
            "QUEUE_MAX['CIRCUIT_BREAKER'] has an unknown key 'RECOVERY_TIMEOUT'.",
            "Did you mean 'TIMEOUT'? ",
        ),
    ],
)
def test_e002_unknown_key(queue_max: Configure, keys: dict[str, Any], message: str, advice: str) -> None:
    assert run(queue_max, **keys) == [
        Error(
            message,
            hint=f"{advice}Remove it or correct its name: every key is listed in docs/reference/settings.md.",
            id="queue_max_django.E002",
        )
    ]


RATE_OR_NONE = 'a rate such as "160/m" or an int per minute, or None'


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ({"LEASE_TIME": "30"}, e003("QUEUE_MAX['LEASE_TIME']", "'30' (str)", "a number of seconds", "30.0")),
        ({"MAX_RETRIES": 1.5}, e003("QUEUE_MAX['MAX_RETRIES']", "1.5 (float)", "an int", "3")),
        ({"MAX_RETRIES": True}, e003("QUEUE_MAX['MAX_RETRIES']", "True (bool)", "an int", "3")),
        ({"SHARDS": "4"}, e003("QUEUE_MAX['SHARDS']", "'4' (str)", "an int or None", "None")),
        ({"TIMEOUT": [1]}, e003("QUEUE_MAX['TIMEOUT']", "[1] (list)", "a number of seconds or None", "None")),
        ({"SYNC": "yes"}, e003("QUEUE_MAX['SYNC']", "'yes' (str)", "True or False", "False")),
        (
            {"UNKNOWN_TASK_GRACE": None},
            e003("QUEUE_MAX['UNKNOWN_TASK_GRACE']", "None (NoneType)", "a number of seconds", "3600.0"),
        ),
        ({"IMMEDIATE": 1}, e003("QUEUE_MAX['IMMEDIATE']", "1 (int)", "True or False", "False")),
        (
            {"QUEUES": "default"},
            e003(
                "QUEUE_MAX['QUEUES']", "'default' (str)", "a non-empty list of queue names, or None", "None"
            ),
        ),
        (
            {"QUEUES": []},
            e003("QUEUE_MAX['QUEUES']", "[] (list)", "a non-empty list of queue names, or None", "None"),
        ),
        ({"RATE_LIMIT": 2.5}, e003("QUEUE_MAX['RATE_LIMIT']", "2.5 (float)", RATE_OR_NONE, "None")),
        (
            {"QUEUE_RATE_LIMITS": [("emails", 5)]},
            e003(
                "QUEUE_MAX['QUEUE_RATE_LIMITS']",
                "[('emails', 5)] (list)",
                'a dict of queue name -> a rate such as "160/m" or an int per minute',
                "{}",
            ),
        ),
        (
            {"QUEUE_RATE_LIMITS": {"emails": None}},
            Error(
                "QUEUE_MAX['QUEUE_RATE_LIMITS']['emails'] must be a rate such as \"160/m\" or an int per "
                "minute, not None (NoneType).",
                hint="Set QUEUE_MAX['QUEUE_RATE_LIMITS']['emails'] to a rate such as \"160/m\" or an int per "
                "minute, or remove it to leave that queue without a limit of its own.",
                id="queue_max_django.E003",
            ),
        ),
        (
            {"CIRCUIT_BREAKER": 5},
            e003("QUEUE_MAX['CIRCUIT_BREAKER']", "5 (int)", "a dict", "{'THRESHOLD': 5, 'TIMEOUT': 60.0}"),
        ),
        (
            {"CIRCUIT_BREAKER": {"THRESHOLD": "5"}},
            e003("QUEUE_MAX['CIRCUIT_BREAKER']['THRESHOLD']", "'5' (str)", "an int", "5"),
        ),
        (
            {"CIRCUIT_BREAKER": {"TIMEOUT": None}},
            e003("QUEUE_MAX['CIRCUIT_BREAKER']['TIMEOUT']", "None (NoneType)", "a number of seconds", "60.0"),
        ),
        ({"WORKER": {"THREADS": "2"}}, e003("QUEUE_MAX['WORKER']['THREADS']", "'2' (str)", "an int", "1")),
        (
            {"WORKER": {"QUEUES": "emails"}},
            e003(
                "QUEUE_MAX['WORKER']['QUEUES']",
                "'emails' (str)",
                "a non-empty list of queue names, or None",
                "None",
            ),
        ),
        (
            {"DATA_DIR": 42},
            e003(
                "QUEUE_MAX['DATA_DIR']",
                "42 (int)",
                "a path (a non-empty str or a pathlib.Path)",
                "BASE_DIR / 'queue_max_data'",
            ),
        ),
        *[
            (
                {"DATA_DIR": value},  # "": an unset environment variable; the engine refuses it too
                e003(
                    "QUEUE_MAX['DATA_DIR']",
                    f"{value!r} (str)",
                    "a path (a non-empty str or a pathlib.Path)",
                    "BASE_DIR / 'queue_max_data'",
                ),
            )
            for value in ("", "   ", "/srv/a\x00b")
        ],
    ],
)
def test_e003_wrong_type(queue_max: Configure, keys: dict[str, Any], expected: Error) -> None:
    assert run(queue_max, **keys) == [expected]


CENTURY = "3155760000"


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ({"LEASE_TIME": 0}, e004("QUEUE_MAX['LEASE_TIME']", f"from 0.5 to {CENTURY}", "0", "30.0")),
        # shorter than the worker renews in time: it beats on a 0.1 s tick, at least 3 times per lease
        ({"LEASE_TIME": 0.05}, e004("QUEUE_MAX['LEASE_TIME']", f"from 0.5 to {CENTURY}", "0.05", "30.0")),
        ({"LEASE_TIME": 0.499}, e004("QUEUE_MAX['LEASE_TIME']", f"from 0.5 to {CENTURY}", "0.499", "30.0")),
        (
            {"LEASE_TIME": float("inf")},
            e004("QUEUE_MAX['LEASE_TIME']", f"from 0.5 to {CENTURY}", "inf", "30.0"),
        ),
        (
            {"RETRY_BACKOFF": -1.0},
            e004("QUEUE_MAX['RETRY_BACKOFF']", f"from 0 to {CENTURY}", "-1.0", "1.0"),
        ),
        (
            {"RESULT_TTL": float("nan")},
            e004("QUEUE_MAX['RESULT_TTL']", f"from 0 to {CENTURY}", "nan", "86400.0"),
        ),
        ({"SHARDS": 0}, e004("QUEUE_MAX['SHARDS']", "from 1 to 256", "0", "None")),
        ({"SHARDS": 257}, e004("QUEUE_MAX['SHARDS']", "from 1 to 256", "257", "None")),
        ({"MAX_RETRIES": -1}, e004("QUEUE_MAX['MAX_RETRIES']", "from 0 to 1000000", "-1", "3")),
        (
            {"MAX_PAYLOAD_BYTES": 8},
            e004("QUEUE_MAX['MAX_PAYLOAD_BYTES']", "from 16 to 1073741824", "8", "1048576"),
        ),
        ({"ALERT_THRESHOLD": -1}, e004("QUEUE_MAX['ALERT_THRESHOLD']", "at least 0", "-1", "None")),
        ({"TIMEOUT": 0}, e004("QUEUE_MAX['TIMEOUT']", f"from 0.001 to {CENTURY}", "0", "None")),
        (
            {"UNKNOWN_TASK_GRACE": -1},
            e004("QUEUE_MAX['UNKNOWN_TASK_GRACE']", f"from 0 to {CENTURY}", "-1", "3600.0"),
        ),
        (
            {"WORKER": {"PROCESSES": 0}},
            e004("QUEUE_MAX['WORKER']['PROCESSES']", "from 1 to 1024", "0", "None"),
        ),
        (
            {"WORKER": {"THREADS": 2000}},
            e004("QUEUE_MAX['WORKER']['THREADS']", "from 1 to 1024", "2000", "1"),
        ),
        ({"WORKER": {"MAX_JOBS": 0}}, e004("QUEUE_MAX['WORKER']['MAX_JOBS']", "at least 1", "0", "None")),
        (
            {"WORKER": {"MAX_MEMORY_MB": -5}},
            e004("QUEUE_MAX['WORKER']['MAX_MEMORY_MB']", "at least 1", "-5", "None"),
        ),
        (
            {"WORKER": {"SHUTDOWN_TIMEOUT": -1}},
            e004("QUEUE_MAX['WORKER']['SHUTDOWN_TIMEOUT']", f"from 0 to {CENTURY}", "-1", "30.0"),
        ),
        (
            {"WORKER": {"BURST_WAIT": -0.5}},
            e004("QUEUE_MAX['WORKER']['BURST_WAIT']", f"from 0 to {CENTURY}", "-0.5", "0.0"),
        ),
        (
            {"WORKER": {"CANCEL_GRACE": -1}},
            e004("QUEUE_MAX['WORKER']['CANCEL_GRACE']", f"from 0 to {CENTURY}", "-1", "10.0"),
        ),
    ],
)
def test_e004_out_of_range(queue_max: Configure, keys: dict[str, Any], expected: Error) -> None:
    assert run(queue_max, **keys) == [expected]


NAME_RULE = "queue must be a non-empty str of at most 100 characters"
CONTROL_RULE = "queue names cannot contain control characters or lone surrogates"


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        (
            {"QUEUES": ["default", ""]},
            f"QUEUE_MAX['QUEUES'] holds an invalid queue name '': {NAME_RULE}, not ''.",
        ),
        (
            {"QUEUE_RATE_LIMITS": {"x" * 101: "1/s"}},
            f"QUEUE_MAX['QUEUE_RATE_LIMITS'] holds an invalid queue name {'x' * 101!r}: {NAME_RULE}, "
            f"not {'x' * 101!r}.",
        ),
        (
            {"WORKER": {"QUEUES": ["a\x00b"]}},
            f"QUEUE_MAX['WORKER']['QUEUES'] holds an invalid queue name 'a\\x00b': {CONTROL_RULE}: 'a\\x00b' "
            "has a control character ('\\x00' at position 1).",
        ),
        (
            {"QUEUES": ["default", "a\nb"]},
            f"QUEUE_MAX['QUEUES'] holds an invalid queue name 'a\\nb': {CONTROL_RULE}: 'a\\nb' has a control "
            "character ('\\n' at position 1).",
        ),
        (
            {"QUEUES": ["\x1b[31mred"]},
            f"QUEUE_MAX['QUEUES'] holds an invalid queue name '\\x1b[31mred': {CONTROL_RULE}: '\\x1b[31mred' "
            "has a control character ('\\x1b' at position 0).",
        ),
        (
            {"QUEUE_RATE_LIMITS": {"bell\x07": "1/s"}},
            f"QUEUE_MAX['QUEUE_RATE_LIMITS'] holds an invalid queue name 'bell\\x07': {CONTROL_RULE}: "
            "'bell\\x07' has a control character ('\\x07' at position 4).",
        ),
        (
            {"QUEUES": ["mail\ud800"]},
            f"QUEUE_MAX['QUEUES'] holds an invalid queue name 'mail\\ud800': {CONTROL_RULE}: 'mail\\ud800' "
            "has a lone surrogate ('\\ud800' at position 4), which has no UTF-8 encoding.",
        ),
        ({"QUEUES": [7]}, f"QUEUE_MAX['QUEUES'] holds an invalid queue name 7: {NAME_RULE}, not 7."),
    ],
)
def test_e005_invalid_queue_name(queue_max: Configure, keys: dict[str, Any], message: str) -> None:
    assert run(queue_max, **keys) == [
        Error(
            message,
            hint="Use names of 1 to 100 characters without control characters.",
            id="queue_max_django.E005",
        )
    ]


RATE_HINT = (
    'Write "<count>/<unit>" with unit s, m, h or d ("160/m", "10/s", "10/5s"), or a positive int per minute.'
)
SPEC_RULE = "expected '<count>/<unit>' such as '160/m', '10/s', '5000/h', '100/d' or '10/5s'"


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        (
            {"RATE_LIMIT": "160/fortnight"},
            f"QUEUE_MAX['RATE_LIMIT'] is not a valid rate: invalid rate '160/fortnight': {SPEC_RULE}.",
        ),
        (
            {"RATE_LIMIT": 0},
            "QUEUE_MAX['RATE_LIMIT'] is not a valid rate: invalid rate 0: the count must be above 0 and "
            "at most 1e+12, not 0.",
        ),
        (
            {"RATE_LIMIT": "0/m"},
            "QUEUE_MAX['RATE_LIMIT'] is not a valid rate: invalid rate '0/m': the count must be above 0 "
            "and at most 1e+12, not 0.0.",
        ),
        (
            {"QUEUE_RATE_LIMITS": {"emails": "fast"}},
            "QUEUE_MAX['QUEUE_RATE_LIMITS']['emails'] is not a valid rate: "
            f"invalid rate 'fast': {SPEC_RULE}.",
        ),
    ],
)
def test_e006_rate_that_does_not_parse(queue_max: Configure, keys: dict[str, Any], message: str) -> None:
    assert run(queue_max, **keys) == [Error(message, hint=RATE_HINT, id="queue_max_django.E006")]


BREAKER_HINT = (
    "THRESHOLD counts consecutive failures (at least 1); TIMEOUT is the seconds before a trial job (above 0)."
)


def test_e007_circuit_breaker_out_of_range(queue_max: Configure) -> None:
    assert run(queue_max, CIRCUIT_BREAKER={"THRESHOLD": 0, "TIMEOUT": 0}) == [
        Error(
            "QUEUE_MAX['CIRCUIT_BREAKER']['THRESHOLD'] is out of range: threshold must be an int from 1 to "
            "4294967295 (consecutive failures), not 0.",
            hint=BREAKER_HINT,
            id="queue_max_django.E007",
        ),
        Error(
            "QUEUE_MAX['CIRCUIT_BREAKER']['TIMEOUT'] is out of range: recovery_timeout must be a finite "
            f"number of seconds above 0 and at most {CENTURY}, not 0.",
            hint=BREAKER_HINT,
            id="queue_max_django.E007",
        ),
    ]


E008 = Error(
    "QUEUE_MAX['DATA_DIR'] is not set and the settings have no BASE_DIR to put it under.",
    hint="Set QUEUE_MAX['DATA_DIR'] to the directory of the job store (an absolute path), or set BASE_DIR.",
    id="queue_max_django.E008",
)


def test_e008_no_data_dir_and_no_base_dir() -> None:
    with override_settings(QUEUE_MAX={}, BASE_DIR=None):
        assert check_settings() == [E008]


def test_e008_when_base_dir_is_not_set_at_all(settings: Any) -> None:
    del settings.BASE_DIR
    settings.QUEUE_MAX = {"LEASE_TIME": 5}
    assert check_settings() == [E008]


def test_data_dir_defaults_under_base_dir_without_a_message(tmp_path: Path) -> None:
    with override_settings(QUEUE_MAX={}, BASE_DIR=tmp_path):
        assert check_settings() == []


def test_e009_data_dir_is_a_file(queue_max: Configure, tmp_path: Path) -> None:
    path = tmp_path / "a-file"
    path.write_text("not a store")
    assert run(queue_max, DATA_DIR=path) == [
        Error(
            f"QUEUE_MAX['DATA_DIR'] ({str(path)!r}) exists and is not a directory.",
            hint="Point DATA_DIR at a directory (it is created if missing), or move that file away.",
            id="queue_max_django.E009",
        )
    ]


def deny_access_to(monkeypatch: pytest.MonkeyPatch, denied: Path) -> None:
    """``os.access`` says no for ``denied`` (tests run as root, for whom permission bits say yes)."""
    real_access = os.access

    def access(path: Any, mode: int, **kwargs: Any) -> bool:
        return Path(path) != denied and real_access(path, mode, **kwargs)

    monkeypatch.setattr("queue_max_django.conf.os.access", access)


E010_HINT = "Give the user that runs Django and the workers write access there, or choose another DATA_DIR."


def test_e010_data_dir_not_writable(
    queue_max: Configure, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir.mkdir()
    deny_access_to(monkeypatch, data_dir)
    assert run(queue_max) == [
        Error(
            f"QUEUE_MAX['DATA_DIR'] ({str(data_dir)!r}) is not writable: this process lacks read, write or "
            f"search permission on {str(data_dir)!r}.",
            hint=E010_HINT,
            id="queue_max_django.E010",
        )
    ]


def test_e010_judges_the_nearest_existing_parent(
    queue_max: Configure, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "missing" / "deeper" / "store"
    deny_access_to(monkeypatch, tmp_path)
    assert run(queue_max, DATA_DIR=path) == [
        Error(
            f"QUEUE_MAX['DATA_DIR'] ({str(path)!r}) is not writable: this process lacks read, write or "
            f"search permission on {str(tmp_path)!r}.",
            hint=E010_HINT,
            id="queue_max_django.E010",
        )
    ]
    assert not (tmp_path / "missing").exists()


def test_checks_create_nothing(queue_max: Configure, data_dir: Path) -> None:
    assert run(queue_max, SHARDS=3) == []
    assert not data_dir.exists()


def test_e011_shards_differ_from_the_store_on_disk(queue_max: Configure, data_dir: Path) -> None:
    Queue(data_dir, shards=2, do_recover=False, do_vacuum=False).close()
    assert run(queue_max, SHARDS=2) == []
    assert run(queue_max, SHARDS=None) == []
    assert run(queue_max, SHARDS=3) == [
        Error(
            f"QUEUE_MAX['SHARDS'] is 3, but the store at {str(data_dir)!r} has 2 shards.",
            hint="Set SHARDS to 2 or None (the count on disk). To change the shard count, drain this store "
            "and point DATA_DIR at a new directory.",
            id="queue_max_django.E011",
        )
    ]


E012_HINT = (
    "Point DATA_DIR at an empty or new directory, or drain the old store with the version that wrote it."
)


def test_e012_data_dir_holds_something_else(queue_max: Configure, data_dir: Path) -> None:
    data_dir.mkdir()
    (data_dir / "store.json").write_text("{}")
    meta = data_dir / "store.json"
    assert run(queue_max) == [
        Error(
            f"QUEUE_MAX['DATA_DIR'] ({str(data_dir)!r}) holds a store this version cannot open: {meta}: "
            f'"layout" must be a layout version (an int >= 1), not None.',
            hint=E012_HINT,
            id="queue_max_django.E012",
        )
    ]


def test_e012_store_of_another_layout(queue_max: Configure, data_dir: Path) -> None:
    data_dir.mkdir()
    (data_dir / "store.json").write_text(
        json.dumps({"format": "queue_max_django", "layout": 99, "shards": 6})
    )
    assert run(queue_max) == [
        Error(
            f"QUEUE_MAX['DATA_DIR'] ({str(data_dir)!r}) holds a store this version cannot open: its layout "
            f"version is 99; this version reads layout 1.",
            hint=E012_HINT,
            id="queue_max_django.E012",
        )
    ]


def test_e012_store_json_that_disagrees_with_the_shard_folders(queue_max: Configure, data_dir: Path) -> None:
    """store.json edited from 6 shards to 4: the jobs of shards 4 and 5 would vanish from view."""
    with Queue(data_dir, do_recover=False, do_vacuum=False) as q:
        q.put_many_to_shard(5, ["x"])
    meta = json.loads((data_dir / "store.json").read_text())
    (data_dir / "store.json").write_text(json.dumps({**meta, "shards": 4}))
    assert run(queue_max) == [
        Error(
            f"QUEUE_MAX['DATA_DIR'] ({str(data_dir)!r}) holds a store this version cannot open: the store at "
            f"{str(data_dir)!r} does not match its store.json: that says 4 shards, but shard-004, shard-005 "
            f'are there too. Nothing was opened. If store.json was edited, restore it ("shards": 6 matches '
            f"the folders there); a shard folder that was removed held jobs that are lost.",
            hint=E012_HINT,
            id="queue_max_django.E012",
        )
    ]


def test_e012_store_json_with_a_shard_count_out_of_range(queue_max: Configure, data_dir: Path) -> None:
    data_dir.mkdir()
    (data_dir / "store.json").write_text(json.dumps({"format": "queue_max_django", "layout": 1, "shards": 0}))
    assert run(queue_max) == [
        Error(
            f"QUEUE_MAX['DATA_DIR'] ({str(data_dir)!r}) holds a store this version cannot open: "
            f'{data_dir / "store.json"}: "shards" must be an int from 1 to 256, not 0. The shard count is '
            f"fixed when a store is made: restore the file, or move the store away and start a new one.",
            hint=E012_HINT,
            id="queue_max_django.E012",
        )
    ]


def test_w001_a_queue_outside_queues(queue_max: Configure) -> None:
    assert run(
        queue_max,
        QUEUES=["default", "emails"],
        QUEUE_RATE_LIMITS={"emails": "1/s", "sms": "1/s"},
        WORKER={"QUEUES": ["default", "reports"]},
    ) == [
        Warning(
            "QUEUE_MAX['QUEUE_RATE_LIMITS'] names the queue 'sms', which is not in QUEUE_MAX['QUEUES'].",
            hint="Add 'sms' to QUEUE_MAX['QUEUES'] or remove it here: no job can be put in a queue outside "
            "QUEUES.",
            id="queue_max_django.W001",
        ),
        Warning(
            "QUEUE_MAX['WORKER']['QUEUES'] names the queue 'reports', which is not in QUEUE_MAX['QUEUES'].",
            hint="Add 'reports' to QUEUE_MAX['QUEUES'] or remove it here: no job can be put in a queue "
            "outside QUEUES.",
            id="queue_max_django.W001",
        ),
    ]


def test_w001_not_without_queues(queue_max: Configure) -> None:
    assert run(queue_max, QUEUE_RATE_LIMITS={"sms": "1/s"}, WORKER={"QUEUES": ["reports"]}) == []


W002_HINT = "Use an absolute path, such as BASE_DIR / 'queue_max_data'."


def test_w002_relative_data_dir(queue_max: Configure) -> None:
    assert run(queue_max, DATA_DIR="var/queue") == [
        Warning(
            "QUEUE_MAX['DATA_DIR'] is a relative path ('var/queue'): each process would open the store "
            "under its own working directory.",
            hint=W002_HINT,
            id="queue_max_django.W002",
        )
    ]
    assert not Path("var").exists()


def test_w002_relative_base_dir() -> None:
    with override_settings(QUEUE_MAX={}, BASE_DIR="project"):
        assert check_settings() == [
            Warning(
                "QUEUE_MAX['DATA_DIR'] is a relative path ('project/queue_max_data'): each process would "
                "open the store under its own working directory.",
                hint=W002_HINT,
                id="queue_max_django.W002",
            )
        ]


def test_e013_a_task_name_registered_twice(queue_max: Configure, scratch_registry: None) -> None:
    @task(name="checks.twice")
    def first() -> None: ...

    @task(name="checks.twice")
    def second() -> None: ...

    where = f"{__name__}.test_e013_a_task_name_registered_twice.<locals>"
    assert registry["checks.twice"] is first
    assert run(queue_max) == [
        Error(
            f"The task name 'checks.twice' is registered twice: by {where}.first and by {where}.second. "
            f"Jobs of that name run {where}.first, even those enqueued through {where}.second.",
            hint=f"Give one of them another name: @task(name=...) on {where}.first or on {where}.second.",
            id="queue_max_django.E013",
        )
    ]


def test_e013_not_for_the_same_function_registered_again(
    queue_max: Configure, scratch_registry: None
) -> None:
    def again() -> None: ...

    task(name="checks.again")(again)
    task(name="checks.again")(again)
    assert run(queue_max) == []


def test_e014_a_periodic_schedule_that_does_not_parse(queue_max: Configure, scratch_registry: None) -> None:
    @periodic_task(cron="*/15 * * *", name="checks.periodic.fields")
    def fields() -> None: ...

    @periodic_task(interval=0, name="checks.periodic.interval")
    def interval() -> None: ...

    @periodic_task(cron="*/15 * * * *", name="checks.periodic.fine")
    def fine() -> None: ...

    hint = (
        "Give @periodic_task interval= (a positive number of seconds) or cron= (five fields: minute hour "
        'day-of-month month day-of-week, such as "*/15 * * * *").'
    )
    assert run(queue_max) == [
        Error(
            "The periodic task 'checks.periodic.fields' has a schedule that does not parse: "
            "cron '*/15 * * *' has 4 fields; it needs 5: minute hour day-of-month month day-of-week. "
            "It is not scheduled.",
            hint=hint,
            id="queue_max_django.E014",
        ),
        Error(
            "The periodic task 'checks.periodic.interval' has a schedule that does not parse: interval must "
            "be a positive, finite number of seconds, not 0. It is not scheduled.",
            hint=hint,
            id="queue_max_django.E014",
        ),
    ]


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("billing\ncharge", "a control character ('\\n' at position 7)"),
        ("\x1b]0;pwned\x07", "a control character ('\\x1b' at position 0)"),
        ("mail\ud800", "a lone surrogate ('\\ud800' at position 4), which has no UTF-8 encoding"),
    ],
    ids=["newline", "escape", "surrogate"],
)
def test_e015_a_task_name_the_engine_refuses(
    queue_max: Configure, scratch_registry: None, name: str, why: str
) -> None:
    @task(name=name)
    def named() -> None: ...

    assert run(queue_max) == [
        Error(
            f"The task name {name!r} cannot name a job: names cannot contain control characters or lone "
            f"surrogates: {name!r} has {why}.",
            hint="Give the task a name= of 1 to 200 characters without control characters (newlines, "
            "escapes) or lone surrogates.",
            id="queue_max_django.E015",
        )
    ]


def test_e015_a_task_name_too_long(queue_max: Configure, scratch_registry: None) -> None:
    name = "n" * 201

    @task(name=name)
    def long() -> None: ...

    assert [(m.id, m.msg) for m in run(queue_max)] == [
        (
            "queue_max_django.E015",
            f"The task name {name!r} cannot name a job: name must be None or a non-empty str of at most 200 "
            f"characters, not {name!r}.",
        )
    ]


def test_every_mistake_is_reported_at_once(queue_max: Configure) -> None:
    found = run(queue_max, LEASE_TIME=0, SYNC="no", UNKNOWN=1, RATE_LIMIT="x")
    assert [message.id for message in found] == [
        "queue_max_django.E002",
        "queue_max_django.E004",
        "queue_max_django.E003",
        "queue_max_django.E006",
    ]


def test_store_checks_wait_for_valid_values(queue_max: Configure, tmp_path: Path) -> None:
    path = tmp_path / "a-file"
    path.write_text("")
    assert [message.id for message in run(queue_max, DATA_DIR=path, LEASE_TIME=0)] == [
        "queue_max_django.E004"
    ]


# --------------------------------------------------------------------------------------- registration


def test_manage_py_check_fails_on_an_error(queue_max: Configure) -> None:
    with queue_max(LEASE_TIME=-1), pytest.raises(SystemCheckError, match=r"queue_max_django\.E004"):
        call_command("check")


def test_a_queue_command_runs_this_apps_checks_and_not_every_other(queue_max: Configure) -> None:
    def broken_templates(**kwargs: Any) -> list[checks.CheckMessage]:
        return [Error("the templates are broken", id="tests.E001")]

    broken_templates.tags = [checks.Tags.templates]  # type: ignore[attr-defined]
    with override_system_checks([broken_templates, check_settings]):
        with queue_max():
            get_queue()  # a store for it to read
            call_command("queue_stats", "--json", skip_checks=False)  # not its concern: it runs
        with queue_max(LEASE_TIME=-1), pytest.raises(SystemCheckError, match=r"queue_max_django\.E004"):
            call_command("queue_stats", "--json", skip_checks=False)


def test_manage_py_check_passes_with_a_warning(
    queue_max: Configure, capsys: pytest.CaptureFixture[str]
) -> None:
    with queue_max(DATA_DIR="relative"):
        call_command("check", "--tag", TAG)
    assert "queue_max_django.W002" in capsys.readouterr().err


def test_manage_py_check_passes_on_valid_settings(queue_max: Configure) -> None:
    with queue_max():
        call_command("check", "--tag", TAG)


def test_the_app_config() -> None:
    config = apps.get_app_config("queue_max_django")
    assert isinstance(config, app_module.QueueMaxAppConfig)
    assert config.verbose_name == "Queue Max"


def test_ready_registers_the_checks_and_imports_tasks_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    registered: list[Any] = checks.registry.registry.get_checks()
    assert check_settings in registered
    assert TAG in checks.registry.registry.tags_available()
    imported: list[str] = []
    monkeypatch.setattr(app_module, "autodiscover_modules", lambda *names: imported.extend(names))
    apps.get_app_config("queue_max_django").ready()
    assert imported == ["tasks"]


def test_every_check_id_is_documented() -> None:
    source = "".join(path.read_text() for path in sorted((ROOT / "queue_max_django").rglob("*.py")))
    docs = (ROOT / "docs" / "reference" / "checks.md").read_text()
    ids = sorted(set(re.findall(r"\{PREFIX\}\.([EW]\d{3})", source)))
    retired = ["E029"]  # ids are never given again: a retired one's page says what became of it
    assert ids == [f"E{n:03d}" for n in range(1, 34) if f"E{n:03d}" not in retired] + [
        "W001", "W002", "W003", "W004",
    ]  # fmt: skip
    for check_id in ids + retired:
        assert f"### `queue_max_django.{check_id}`" in docs, check_id
    for check_id in retired:
        assert f"### `queue_max_django.{check_id}` (retired)" in docs, check_id
