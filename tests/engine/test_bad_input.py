"""Invariant 7: bad input gets a clear exception before anything is written; and Queue(...) mistakes raise
ConfigurationError before anything is opened.
"""

from __future__ import annotations

import collections
import datetime as dt
import enum
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from queue_max_django.engine import (
    ConfigurationError,
    InvalidJob,
    PayloadNotSerializable,
    PayloadTooLarge,
    Queue,
    QueueError,
    State,
    UnknownQueue,
)
from queue_max_django.engine.validate import check_put
from tests import pgserver
from tests.engine import memprobe
from tests.engine.conftest import FakeClock
from tests.engine.locations import StoreLocation
from tests.engine.probes import StoreProbe
from tests.stores import STORE_KINDS, store_kind_param

LIMIT = 1024
Probe = Callable[[Queue], StoreProbe]
MakeQueue = Callable[..., Queue]


store_kind = pytest.fixture(scope="module", params=STORE_KINDS, name="store_kind")(store_kind_param)
"""The suite's ``store_kind`` (tests/stores.py), for the whole module: ``refusing_queue`` is shared by its
tests."""


@pytest.fixture
def small_queue(make_queue: MakeQueue) -> Queue:
    return make_queue(max_payload_bytes=LIMIT)


@pytest.fixture(scope="module")
def refusing_queue(
    store_kind: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Queue]:
    """One store for all the refused puts (they must leave it as it is, so they can share it)."""
    if store_kind == "postgres":
        request.getfixturevalue("pg_server")
        location = StoreLocation(store_kind, pgserver.fresh_database())
    elif store_kind == "memory":
        location = StoreLocation(store_kind, memprobe.new_location())
    else:
        location = StoreLocation(store_kind, str(tmp_path_factory.mktemp("refusals") / "store"))
    with location.open_queue(clock=FakeClock(), retry_backoff=0, max_payload_bytes=LIMIT) as q:
        q.put("already here")
        yield q


NAIVE = dt.datetime(2030, 1, 1, 12, 0)
# Unicode category Cc (C0, DEL, C1: newline, ESC, BEL, NEL, CSI) and a lone surrogate: never in a name
CONTROL = ["\n", "\r", "\x1b", "\x07", "\x7f", "\x85", "\x9b", "\ud800", "\udfff"]
NAMED = "control characters or lone surrogates"

# (payload, put options, exception, what the message must name)
BAD_PUTS = [
    (object(), {}, PayloadNotSerializable, "payload"),
    ({"when": dt.date(2024, 1, 1)}, {}, PayloadNotSerializable, "payload"),
    ("x" * (LIMIT + 1), {}, PayloadTooLarge, "max_payload_bytes"),
    ("x", {"priority": 101}, InvalidJob, "priority"),
    ("x", {"priority": -101}, InvalidJob, "priority"),
    ("x", {"priority": True}, InvalidJob, "priority"),
    ("x", {"priority": 1.0}, InvalidJob, "priority"),
    ("x", {"priority": "5"}, InvalidJob, "priority"),
    ("x", {"priority": None}, InvalidJob, "priority"),
    ("x", {"delay": -1}, InvalidJob, "delay"),
    ("x", {"delay": -0.001}, InvalidJob, "delay"),
    ("x", {"delay": math.nan}, InvalidJob, "delay"),
    ("x", {"delay": math.inf}, InvalidJob, "delay"),
    ("x", {"delay": "5"}, InvalidJob, "delay"),
    ("x", {"delay": 1e300}, InvalidJob, "delay"),
    ("x", {"eta": NAIVE}, InvalidJob, "aware"),
    ("x", {"eta": math.nan}, InvalidJob, "eta"),
    ("x", {"eta": -1}, InvalidJob, "eta"),
    ("x", {"eta": "tomorrow"}, InvalidJob, "eta"),
    ("x", {"eta": 1e300}, InvalidJob, "eta"),
    ("x", {"delay": 5, "eta": 1_800_000_000}, InvalidJob, "both"),
    ("x", {"queue": ""}, InvalidJob, "queue"),
    ("x", {"queue": 5}, InvalidJob, "queue"),
    ("x", {"queue": None}, InvalidJob, "queue"),
    ("x", {"queue": "a\x00b"}, InvalidJob, "queue"),
    ("x", {"queue": "q" * 101}, InvalidJob, "queue"),
    *[("x", {"queue": f"a{char}b"}, InvalidJob, f"queue names cannot contain {NAMED}") for char in CONTROL],
    *[("x", {"name": f"a{char}b"}, InvalidJob, f"names cannot contain {NAMED}") for char in CONTROL],
    ("x", {"partition_key": "a\ud800"}, InvalidJob, "partition_key must be valid Unicode"),
    ("x", {"name": ""}, InvalidJob, "name"),
    ("x", {"name": 5}, InvalidJob, "name"),
    ("x", {"name": "n" * 201}, InvalidJob, "name"),
    ("x", {"max_retries": -1}, InvalidJob, "max_retries"),
    ("x", {"max_retries": True}, InvalidJob, "max_retries"),
    ("x", {"max_retries": 1.5}, InvalidJob, "max_retries"),
    ("x", {"max_retries": 2**64}, InvalidJob, "max_retries"),
    ("x", {"timeout": 0}, InvalidJob, "timeout"),
    ("x", {"timeout": -1}, InvalidJob, "timeout"),
    ("x", {"timeout": "1"}, InvalidJob, "timeout"),
    ("x", {"partition_key": [1]}, InvalidJob, "partition_key"),
    ("x", {"partition_key": 1.5}, InvalidJob, "partition_key"),
    ("x", {"partition_key": 2**64}, InvalidJob, "partition_key"),
]


def _case_id(case: tuple[Any, dict[str, Any], type, str]) -> str:
    payload, options, error, _ = case
    what = ",".join(f"{k}={v!r}"[:30] for k, v in options.items()) or f"payload={type(payload).__name__}"
    return f"{error.__name__}:{what}"


@pytest.mark.contract
@pytest.mark.inv_7
@pytest.mark.parametrize(
    ("payload", "options", "error", "named"), BAD_PUTS, ids=[_case_id(c) for c in BAD_PUTS]
)
def test_bad_put_raises_before_writing(
    refusing_queue: Queue,
    probe: Probe,
    payload: Any,
    options: dict[str, Any],
    error: type[Exception],
    named: str,
) -> None:
    """inv_7: each bad argument of put()/put_many() raises its own exception naming the problem, and
    nothing reaches the store."""
    q = refusing_queue
    before = probe(q).snapshot()
    stats = q.stats()

    with pytest.raises(error, match=named) as caught:
        q.put(payload, **options)
    assert isinstance(caught.value, QueueError)
    with pytest.raises(error, match=named):
        q.put_many(["fine", payload], **options)

    assert probe(q).snapshot() == before
    assert q.stats() == stats and stats["total"] == 1
    assert q.verify() == []


@pytest.mark.contract
@pytest.mark.inv_7
@pytest.mark.parametrize(
    ("good", "bad"),
    [
        ({"priority": 0}, {"priority": False}),
        ({"priority": 1}, {"priority": True}),
        ({"priority": 1}, {"priority": 1.0}),
        ({"max_retries": 0}, {"max_retries": False}),
        ({"max_retries": 1}, {"max_retries": True}),
        ({"max_retries": 1}, {"max_retries": 1.0}),
    ],
    ids=repr,
)
def test_options_put_before_never_let_an_equal_bad_value_through(
    small_queue: Queue, probe: Probe, good: dict[str, Any], bad: dict[str, Any]
) -> None:
    """inv_7: put() reuses what it built for options it validated before; a bad value that compares equal
    to one of those (False == 0, 1.0 == 1) is still refused, and nothing is written."""
    q = small_queue
    q.put("fine", **good)
    before = probe(q).snapshot()

    with pytest.raises(InvalidJob, match=next(iter(bad))):
        q.put("bad", **bad)

    assert probe(q).snapshot() == before


@pytest.mark.contract
@pytest.mark.inv_7
def test_payload_size_limit_is_on_the_encoded_bytes(small_queue: Queue) -> None:
    """inv_7: a payload encoded in exactly max_payload_bytes is stored; one byte more is refused."""
    fits = "x" * (LIMIT - 3)  # str 16 header: 3 bytes
    assert len(msgpack.packb(fits)) == LIMIT
    too_big = fits + "x"
    job_id = small_queue.put(fits)
    assert small_queue.job(job_id).payload == fits
    with pytest.raises(PayloadTooLarge) as caught:
        small_queue.put(too_big)
    assert f"{LIMIT + 1:,}" in str(caught.value) and f"{LIMIT:,}" in str(caught.value)
    assert small_queue.stats()["total"] == 1


@pytest.mark.contract
@pytest.mark.inv_7
def test_unknown_queue_name_is_refused(make_queue: MakeQueue, probe: Probe) -> None:
    """inv_7: a queue name the Queue was not opened with raises UnknownQueue naming it; nothing written."""
    with make_queue(queues=["mail"]) as q:
        before = probe(q).snapshot()
        with pytest.raises(UnknownQueue, match="'sms'"):
            q.put("x", queue="sms")
        with pytest.raises(UnknownQueue, match="'sms'"):
            q.put_many(["x"], queue="sms")
        with pytest.raises(UnknownQueue, match="'sms'"):
            q.get(0, queues=["mail", "sms"])
        assert probe(q).snapshot() == before
        assert q.stats()["total"] == 0 and q.verify() == []


@pytest.mark.contract
@pytest.mark.inv_7
@pytest.mark.parametrize(
    ("result", "error"),
    [
        (object(), PayloadNotSerializable),
        ("r" * (LIMIT + 1), PayloadTooLarge),
        ({"d": dt.date.today()}, PayloadNotSerializable),
    ],
    ids=["object", "too-large", "date"],
)
def test_bad_result_leaves_the_job_running(small_queue: Queue, result: Any, error: type[Exception]) -> None:
    """inv_7: ack(result=<bad>) raises before writing; the job is still running and the record can ack."""
    job_id = small_queue.put("x")
    record = small_queue.get(0)
    before = small_queue.job(job_id)
    with pytest.raises(error, match="result"):
        record.ack(result=result)
    assert small_queue.job(job_id) == before
    record.ack(result="ok")
    assert small_queue.job(job_id).state is State.DONE


@pytest.mark.contract
@pytest.mark.inv_7
@pytest.mark.parametrize("delay", [-1, math.nan, math.inf, 1e300, "5", True], ids=repr)
def test_bad_nack_delay_leaves_the_job_running(queue: Queue, delay: Any) -> None:
    """inv_7: nack(delay=<bad>) raises a clear QueueError (a ValueError) and changes nothing; the record can
    still nack properly afterwards."""
    job_id = queue.put("x")
    record = queue.get(0)
    before = queue.job(job_id)
    with pytest.raises(QueueError, match="delay") as caught:
        record.nack("e", delay=delay)
    assert isinstance(caught.value, ValueError)
    assert queue.job(job_id) == before
    assert record.nack("e", delay=0) is State.PENDING
    assert queue.verify() == []


@pytest.mark.contract
@pytest.mark.inv_7
@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda q: q.get(timeout=-1), "timeout"),
        (lambda q: q.get(timeout="1"), "timeout"),
        (lambda q: q.get(timeout=True), "timeout"),
        (lambda q: q.get(timeout=math.nan), "timeout"),
        (lambda q: q.get(timeout=math.inf), "timeout"),
        (lambda q: q.get_many(5, timeout=-0.5), "timeout"),
        (lambda q: q.get(0, queues=[""]), "queue"),
        (lambda q: q.jobs("waiting"), "state"),
        (lambda q: q.purge("dead"), "state"),
        (lambda q: q.purge(State.DONE, older_than=-1), "older_than"),
        (lambda q: q.vacuum(older_than=-1), "older_than"),
        (lambda q: q.cancel("1"), "job_id"),
        (lambda q: q.requeue(-3), "job_id"),
        (lambda q: q.jobs("pending", queue="a\udcff"), "queue must be valid Unicode"),
        (lambda q: q.jobs("failed", name="\ud800"), "name must be valid Unicode"),
    ],
    ids=[
        "get-timeout-negative",
        "get-timeout-str",
        "get-timeout-bool",
        "get-timeout-nan",
        "get-timeout-inf",
        "get-many-timeout-negative",
        "get-queue-empty",
        "jobs-state",
        "purge-state",
        "purge-older-than",
        "vacuum-older-than",
        "cancel-id",
        "requeue-id",
        "jobs-queue-surrogate",
        "jobs-name-surrogate",
    ],
)
def test_bad_arguments_of_other_calls_are_refused(queue: Queue, probe: Probe, call: Any, named: str) -> None:
    """inv_7: get/jobs/purge/vacuum/cancel/requeue refuse bad arguments with a ValueError that is a
    QueueError naming the argument, and change nothing."""
    queue.put("x")
    before = probe(queue).snapshot()
    with pytest.raises(QueueError, match=named) as caught:
        call(queue)
    assert isinstance(caught.value, ValueError)
    assert probe(queue).snapshot() == before


# ------------------------------------------------------------------------------------ configuration


BAD_CONFIG = [
    {"shards": 0},
    {"shards": 257},
    {"shards": True},
    {"shards": 1.5},
    {"shards": "6"},
    {"lease_time": 0},
    {"lease_time": -1},
    {"lease_time": "30"},
    {"lease_time": math.nan},
    {"lease_time": math.inf},
    {"max_retries": -1},
    {"max_retries": True},
    {"max_retries": 1.5},
    {"max_retries": None},
    {"retry_backoff": -1},
    {"retry_backoff": math.nan},
    {"retry_backoff_max": -1},
    {"result_ttl": -1},
    {"result_ttl": math.nan},
    {"max_payload_bytes": 0},
    {"max_payload_bytes": "1MB"},
    {"map_size": 100},
    {"map_size": 1 << 24, "map_size_max": 1 << 22},
    {"queues": "default"},
    {"queues": [""]},
    {"queues": ["ok", 5]},
    {"queues": ["a\x00b"]},
    {"queues": ["a\nb"]},
    {"queues": ["ok", "a\ud800"]},
    {"worker_id": "w\x1b[2J"},
    {"worker_id": "w\udc00"},
    {"recover_interval": 0},
    {"vacuum_interval": -1},
    {"sync_interval": 0},
    {"clock": 5},
]


@pytest.mark.contract
@pytest.mark.rule_config
@pytest.mark.parametrize("options", BAD_CONFIG, ids=[repr(o)[:40] for o in BAD_CONFIG])
def test_constructor_mistakes_raise_configuration_error(
    location: StoreLocation, options: dict[str, Any]
) -> None:
    """rule_config: a bad Queue(...) argument raises ConfigurationError naming it, before any file exists
    (the LMDB store's own options too, which the PostgreSQL store refuses whatever their value)."""
    name = next(iter(options)) if len(options) == 1 else "map_size_max"
    try:
        q = Queue(location.where, do_recover=False, do_vacuum=False, **options)
    except ConfigurationError as exc:
        assert name in str(exc)
    else:
        q.close()
        pytest.fail(f"Queue(**{options!r}) was accepted")
    assert not location.exists()


@pytest.mark.contract
@pytest.mark.rule_config
@pytest.mark.parametrize("path", ["", "   ", b"", None, 5], ids=repr)
@pytest.mark.lmdb  # the LMDB store's path argument
def test_an_empty_or_wrong_path_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: Any
) -> None:
    """rule_config: Queue("") (an unset environment variable) raises ConfigurationError, and creates
    nothing in the current directory; so does a path that is not a str or path-like."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError, match="path"):
        Queue(path, do_recover=False, do_vacuum=False)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.contract
@pytest.mark.rule_config
def test_infinite_result_ttl_is_refused_or_keeps_results(make_queue: MakeQueue, clock: FakeClock) -> None:
    """rule_config: result_ttl=inf either raises ConfigurationError or means "keep results forever"; it
    must not make vacuum() (and the background thread) crash."""
    try:
        q = make_queue(result_ttl=math.inf)
    except ConfigurationError:
        return
    with q:
        job_id = q.put("x")
        q.get(0).ack("kept")
        clock.advance(10 * 365 * 86400)
        assert q.vacuum() == 0
        assert q.job(job_id).result == "kept"


@pytest.mark.contract
@pytest.mark.rule_config
def test_good_configuration_is_kept(make_queue: MakeQueue, store_kind: str) -> None:
    """rule_config: valid arguments are accepted and visible on the Queue (``shards`` shapes an LMDB store;
    the PostgreSQL store has one shard)."""
    options: dict[str, Any] = {
        "shards": 3, "lease_time": 5, "max_retries": 0, "retry_backoff": 0.5, "retry_backoff_max": 10,
        "result_ttl": 0, "max_payload_bytes": 100, "queues": ("a", "b"),
    }  # fmt: skip
    with make_queue(**options) as q:
        assert q.shard_count == (3 if store_kind == "lmdb" else 1)
        assert (q.lease_time, q.max_retries, q.retry_backoff, q.retry_backoff_max) == (5.0, 0, 0.5, 10.0)
        assert (q.result_ttl, q.max_payload_bytes, q.queues) == (0.0, 100, frozenset({"a", "b"}))


@pytest.mark.contract
@pytest.mark.inv_7
def test_a_job_name_never_passes_as_a_queue_name(make_queue: MakeQueue) -> None:
    """inv_7: names already accepted as job names are not thereby accepted as queue names: a Queue limited
    to some queues still refuses another queue after a job used that string as its name."""
    with make_queue(queues=["mail"]) as q:
        q.put("x", queue="mail", name="reports")
        with pytest.raises(UnknownQueue):
            q.put("y", queue="reports")
        assert q.stats()["total"] == 1


# ------------------------------------------------------------------------------------ round trips


class Color(enum.IntEnum):
    RED = 1


class Status(enum.StrEnum):
    ACTIVE = "active"


TUPLE_KEY = "its key is a tuple, which msgpack stores as a list"
UNREADABLE = [
    # (payload, the path the message must name, what it must say)
    ({(1, 2): "x"}, "payload[(1, 2)]", TUPLE_KEY),
    ({"args": [{(1, 2): "x"}], "kwargs": {}}, "payload['args'][0][(1, 2)]", TUPLE_KEY),
    ({"kwargs": {"a": [{("k",): 1}]}}, "payload['kwargs']['a'][0][('k',)]", TUPLE_KEY),
    ({"kwargs": {"s": "a\ud800b"}}, "payload['kwargs']['s']", "it is a str with a lone surrogate ('\\ud800'"),
    ({"\udc80": 1}, "payload['\\udc80']", "its key is a str with a lone surrogate"),
    ({"n": [1, 2**64]}, "payload['n'][1]", "outside msgpack's 64-bit range"),
    ({"x": {frozenset(): 1}}, "payload['x'][frozenset()]", "its key is a frozenset, which is not msgpack"),
    ([dt.date(2024, 1, 1)], "payload[0]", "it is a date, which is not msgpack data"),
]


@pytest.mark.contract
@pytest.mark.inv_7
@pytest.mark.parametrize(("payload", "path", "why"), UNREADABLE, ids=[c[1] for c in UNREADABLE])
def test_a_payload_that_would_not_read_back_is_refused_with_its_path(
    refusing_queue: Queue, probe: Probe, payload: Any, path: str, why: str
) -> None:
    """inv_7: a payload msgpack cannot encode, or encodes so that it cannot be decoded (a tuple key comes
    back as a list, which cannot be a key), raises PayloadNotSerializable naming the path to the bad part;
    put_many names the payload's index. Nothing is written, and the store verifies clean."""
    q = refusing_queue
    before, total = probe(q).snapshot(), q.stats()["total"]

    with pytest.raises(PayloadNotSerializable) as caught:
        q.put(payload)
    assert str(caught.value).startswith(f"{path} cannot be stored: ") and why in str(caught.value)
    with pytest.raises(PayloadNotSerializable) as caught:
        q.put_many(["fine", "also fine", payload])
    batch_path = path.replace("payload", "payloads[2]", 1)
    assert str(caught.value).startswith(f"{batch_path} cannot be stored: ") and why in str(caught.value)
    with pytest.raises(PayloadNotSerializable):
        q.put_many(iter(["fine", payload]))

    assert probe(q).snapshot() == before and q.stats()["total"] == total
    assert q.verify() == []


@pytest.mark.contract
@pytest.mark.inv_7
def test_a_result_that_would_not_read_back_leaves_the_job_running(small_queue: Queue) -> None:
    """inv_7: ack(result={(1, 2): ...}) raises naming result[(1, 2)]; the job is still running, unchanged."""
    job_id = small_queue.put("x")
    record = small_queue.get(0)
    before = small_queue.job(job_id)
    with pytest.raises(PayloadNotSerializable, match=r"^result\[\(1, 2\)\] cannot be stored"):
        record.ack(result={(1, 2): "r"})
    assert small_queue.job(job_id) == before
    record.ack(result={"1,2": "r"})
    assert small_queue.job(job_id).result == {"1,2": "r"}


@pytest.mark.contract
@pytest.mark.inv_7
def test_tuples_and_subclasses_are_stored_as_their_plain_types(small_queue: Queue) -> None:
    """inv_7: what is accepted reads back: tuples (and namedtuples) as lists, an IntEnum as its int, a str
    enum as its str, an OrderedDict as a dict, bytearray as bytes; int, bytes, bool and None keys stay."""
    point = collections.namedtuple("point", "x y")
    payload = {
        "t": (1, (2, 3)), "p": point(1, 2), "c": Color.RED, "s": Status.ACTIVE,
        "o": collections.OrderedDict(a=(1,)), "b": bytearray(b"ab"), "keys": {1: "i", b"k": "b", None: "n"},
    }  # fmt: skip
    job_id = small_queue.put(payload)
    small_queue.put_many([payload, (payload,)])
    stored = small_queue.job(job_id).payload
    assert stored == {
        "t": [1, [2, 3]], "p": [1, 2], "c": 1, "s": "active", "o": {"a": [1]}, "b": b"ab",
        "keys": {1: "i", b"k": "b", None: "n"},
    }  # fmt: skip
    assert [type(stored[key]) for key in ("c", "s", "o", "b")] == [int, str, dict, bytes]
    assert small_queue.verify() == [] and small_queue.stats()["total"] == 3


@pytest.mark.contract
@pytest.mark.inv_7
def test_nesting_deeper_than_the_reader_reads_is_refused(
    refusing_queue: Queue, make_queue: MakeQueue
) -> None:
    """inv_7: a payload nested past msgpack's limits raises PayloadNotSerializable saying so (not a raw
    ValueError); 1,000 levels are stored and read back."""

    def nested(levels: int) -> list[Any]:
        value: list[Any] = []
        for _ in range(levels - 1):
            value = [value]
        return value

    q = refusing_queue
    total = q.stats()["total"]
    with pytest.raises(PayloadNotSerializable, match="nested more than 1024 levels deep"):
        q.put(nested(100_000))
    assert q.stats()["total"] == total
    with make_queue() as other:  # a store of its own
        job_id = other.put(nested(1000))
        stored = other.job(job_id)
        assert stored is not None
        depth, value = 1, stored.payload  # counted in a loop: == on 1,000 levels recurses past 3.11's limit
        while value:
            (value,) = value
            depth += 1
        assert value == [] and depth == 1000


@pytest.mark.contract
@pytest.mark.inv_7
@pytest.mark.parametrize(
    "options",
    [options for _, options, _, _ in BAD_PUTS if options] + [{"queue": "sms"}, {"queue": "mail", "delay": 5}],
    ids=repr,
)
def test_check_put_refuses_what_put_refuses(
    make_queue: MakeQueue, clock: FakeClock, options: dict[str, Any]
) -> None:
    """inv_7: validate.check_put (no Queue, no store: queue_enqueue checks a whole file with it before it
    writes a job) raises what put() raises for the same options, with the same message; and accepts what
    put() accepts."""
    with make_queue(queues=["default", "mail"]) as q:
        try:
            q.put("x", **options)
        except InvalidJob as exc:
            with pytest.raises(type(exc)) as caught:
                check_put(**options, queues=q.queues, now=clock())
            assert str(caught.value) == str(exc)
        else:
            check_put(**options, queues=q.queues, now=clock())
