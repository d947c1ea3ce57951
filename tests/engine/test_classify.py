"""Error classification (engine/classify.py): each rule, their precedence, and Retry-After parsing.

Tiny fake exception classes stand in for HTTP libraries' errors; no HTTP library is imported.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import http
import pickle
import time
from typing import Any

import pytest

from queue_max_django.engine.classify import (
    Decision,
    Permanent,
    Retry,
    classify,
    http_status,
    parse_retry_after,
    retry_after,
)

NOW = 1_700_000_000.0


class Response:
    """A response object like requests' or httpx's: a status code and (maybe) headers."""

    def __init__(self, status_code: Any, headers: Any = None) -> None:
        self.status_code = status_code
        if headers is not None:
            self.headers = headers


class BareResponse:
    """A response with a status code and no ``headers`` attribute at all."""

    def __init__(self, status_code: Any) -> None:
        self.status_code = status_code


class ResponseError(Exception):
    """Like requests.HTTPError / httpx.HTTPStatusError: the status is on ``exc.response``."""

    def __init__(self, response: Any) -> None:
        super().__init__("response error")
        self.response = response


class StatusError(Exception):
    """Like aiohttp.ClientResponseError: ``status`` and ``headers`` on the exception."""

    def __init__(self, status: Any, headers: Any = None) -> None:
        super().__init__(f"status {status}")
        self.status = status
        self.headers = headers


class StatusCodeError(Exception):
    def __init__(self, status_code: Any, retry_after: Any = None) -> None:
        super().__init__(f"status code {status_code}")
        self.status_code = status_code
        self.retry_after = retry_after


class ReadTimeout(TimeoutError):
    pass


class Flaky(Exception):
    pass


class Broken(Exception):
    pass


class RaisingStatus(Exception):
    @property
    def status(self) -> int:
        raise RuntimeError("no status here")

    status_code = 404


# ------------------------------------------------------------------ Retry and Permanent


def test_retry_with_a_delay() -> None:
    decision = classify(Retry(delay=30))
    assert decision == Decision(True, 30.0, "Retry(delay=30) raised")


def test_retry_without_a_delay_uses_the_backoff() -> None:
    decision = classify(Retry("upstream busy"))
    assert decision.retry
    assert decision.delay is None
    assert "upstream busy" in decision.reason


def test_retry_keeps_its_reason_and_cause() -> None:
    cause = ConnectionResetError("reset")
    exc = Retry("flaky upstream", delay=0, cause=cause)
    assert (exc.reason, exc.delay, exc.cause, exc.__cause__) == ("flaky upstream", 0.0, cause, cause)
    assert str(exc) == "flaky upstream"
    assert classify(exc) == Decision(True, 0.0, "Retry(delay=0) raised: flaky upstream")
    try:
        raise Retry(delay=5) from cause
    except Retry as raised:
        assert raised.cause is cause


def test_retry_pickles_with_its_delay() -> None:
    exc = pickle.loads(pickle.dumps(Retry("again", delay=2.5)))
    assert (exc.reason, exc.delay) == ("again", 2.5)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"delay": -1}, ValueError),
        ({"delay": 1e12}, ValueError),
        ({"delay": float("nan")}, TypeError),
        ({"delay": float("inf")}, TypeError),
        ({"delay": "5"}, TypeError),
        ({"delay": True}, TypeError),
    ],
)
def test_retry_refuses_a_bad_delay(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error, match="delay"):
        Retry(**kwargs)


def test_retry_with_a_number_for_the_reason_points_at_delay() -> None:
    with pytest.raises(TypeError, match=r"Retry\(delay=30\)"):
        Retry(30)  # type: ignore[arg-type]


def test_permanent() -> None:
    assert classify(Permanent("bad input")) == Decision(False, None, "Permanent raised: bad input")
    assert classify(Permanent()) == Decision(False, None, "Permanent raised")


def test_retry_and_permanent_are_plain_exceptions() -> None:
    from queue_max_django.engine.errors import QueueError

    for kind in (Retry, Permanent):
        assert issubclass(kind, Exception)
        assert not issubclass(kind, QueueError)


# ------------------------------------------------------------------ precedence


def test_retry_beats_permanent_on() -> None:
    assert classify(Retry(delay=1), permanent_on=Exception).retry


def test_permanent_beats_retry_on() -> None:
    assert not classify(Permanent("no"), retry_on=Exception).retry


def test_permanent_on_beats_retry_on() -> None:
    decision = classify(Flaky(), retry_on=Flaky, permanent_on=[Flaky])
    assert decision == Decision(False, None, f"{Flaky.__module__}.Flaky is listed in permanent_on")


def test_permanent_on_matches_subclasses() -> None:
    assert not classify(ConnectionResetError(), permanent_on=ConnectionError).retry


def test_retry_on_beats_an_http_client_error() -> None:
    decision = classify(StatusError(404), retry_on=(StatusError,))
    assert decision.retry
    assert decision.delay is None
    assert "retry_on" in decision.reason


def test_permanent_on_beats_http_5xx_and_timeouts() -> None:
    assert not classify(StatusError(503), permanent_on=StatusError).retry
    assert not classify(TimeoutError(), permanent_on=(TimeoutError,)).retry


def test_http_status_beats_the_timeout_rule() -> None:
    class HttpTimeout(TimeoutError):
        status_code = 404

    assert classify(HttpTimeout()) == Decision(False, None, "HTTP 404 is a client error")


@pytest.mark.parametrize("bad", [int, "ValueError", ValueError("x"), (ValueError, 3), [None], object])
def test_retry_on_and_permanent_on_must_be_exception_classes(bad: Any) -> None:
    with pytest.raises(TypeError, match="retry_on"):
        classify(ValueError(), retry_on=bad)
    with pytest.raises(TypeError, match="permanent_on"):
        classify(ValueError(), permanent_on=bad)


def test_retry_on_accepts_a_class_a_tuple_or_a_list() -> None:
    for retry_on in (Broken, (Flaky, Broken), [Broken]):
        assert "retry_on" in classify(Broken(), retry_on=retry_on).reason  # type: ignore[arg-type]


# ------------------------------------------------------------------ HTTP status


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 410, 422, 499])
def test_4xx_is_permanent(status: int) -> None:
    assert classify(StatusError(status)) == Decision(False, None, f"HTTP {status} is a client error")


def test_408_retries_with_backoff() -> None:
    decision = classify(StatusError(408))
    assert decision.retry
    assert decision.delay is None
    assert decision.reason.startswith("HTTP 408 is a request timeout")


@pytest.mark.parametrize("status", [500, 502, 503, 504, 599])
def test_5xx_retries_with_backoff(status: int) -> None:
    decision = classify(StatusError(status))
    assert (decision.retry, decision.delay) == (True, None)
    assert decision.reason.startswith(f"HTTP {status} is a server error")


def test_429_without_retry_after_uses_the_backoff() -> None:
    decision = classify(StatusError(429))
    assert (decision.retry, decision.delay) == (True, None)
    assert decision.reason.startswith("HTTP 429 is rate limiting")


@pytest.mark.parametrize("status", [200, 204, 301, 304, 100])
def test_other_statuses_decide_nothing(status: int) -> None:
    decision = classify(StatusError(status))
    assert (decision.retry, decision.delay) == (True, None)
    assert "not classified" in decision.reason


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (StatusError(404), 404),
        (StatusCodeError(404), 404),
        (ResponseError(Response(404)), 404),
        (ResponseError(BareResponse(502)), 502),
        (StatusError("404"), 404),
        (StatusError(b"404"), 404),
        (StatusError(" 404 "), 404),
        (StatusError(http.HTTPStatus.NOT_FOUND), 404),
        (StatusError(404.0), 404),
        (StatusError(True), None),
        (StatusError("abc"), None),
        (StatusError("4040"), None),
        (StatusError(404.5), None),
        (StatusError(object()), None),
        (StatusError(None), None),
        (StatusError(700), None),
        (StatusError(99), None),
        (StatusError(-404), None),
        (ResponseError(None), None),
        (ResponseError("not a response"), None),
        (ValueError("plain"), None),
        (RaisingStatus(), 404),  # a property that raises is skipped; status_code is used
    ],
)
def test_http_status_is_found_where_libraries_put_it(exc: BaseException, status: int | None) -> None:
    assert http_status(exc) == status


def test_status_is_looked_at_before_status_code_and_response() -> None:
    exc = StatusError(404)
    exc.status_code = 503  # type: ignore[attr-defined]
    exc.response = Response(500)  # type: ignore[attr-defined]
    assert http_status(exc) == 404
    exc.status = "garbage"
    assert http_status(exc) == 503


# ------------------------------------------------------------------ Retry-After


def test_429_honours_retry_after_in_the_response_headers() -> None:
    exc = ResponseError(Response(429, {"Retry-After": "30"}))
    assert classify(exc) == Decision(True, 30.0, "HTTP 429 is rate limiting; Retry-After: 30")


def test_503_honours_retry_after_too() -> None:
    exc = ResponseError(Response(503, {"Retry-After": "120"}))
    assert classify(exc) == Decision(True, 120.0, "HTTP 503 is a server error; Retry-After: 120")


def test_other_statuses_ignore_retry_after() -> None:
    assert classify(ResponseError(Response(500, {"Retry-After": "30"}))).delay is None
    assert classify(ResponseError(Response(408, {"Retry-After": "30"}))).delay is None


def test_header_names_are_case_insensitive_in_a_plain_dict() -> None:
    assert classify(ResponseError(Response(429, {"RETRY-after": "7"}))).delay == 7
    assert classify(ResponseError(Response(429, {"retry-after": "8"}))).delay == 8


def test_retry_after_on_the_exception_headers() -> None:
    assert classify(StatusError(429, {"Retry-After": "12"})).delay == 12


def test_retry_after_attribute() -> None:
    assert classify(StatusCodeError(429, retry_after=3)).delay == 3
    assert classify(StatusCodeError(429, retry_after="4")).delay == 4
    assert classify(StatusCodeError(429, retry_after=dt.timedelta(seconds=5))).delay == 5


def test_sources_are_tried_in_order_and_garbage_falls_through() -> None:
    exc = StatusError(429, {"Retry-After": "5"})
    exc.response = Response(429, {"Retry-After": "9"})  # type: ignore[attr-defined]
    exc.retry_after = 11  # type: ignore[attr-defined]
    assert classify(exc).delay == 9
    exc.response = Response(429, {"Retry-After": "soon"})  # type: ignore[attr-defined]
    assert classify(exc).delay == 5
    exc.headers = {}
    assert classify(exc).delay == 11


def test_an_http_date_is_relative_to_now() -> None:
    header = email.utils.formatdate(NOW + 90, usegmt=True)
    exc = ResponseError(Response(429, {"Retry-After": header}))
    assert classify(exc, now=NOW).delay == 90
    assert classify(exc, now=NOW + 30).delay == 60
    assert classify(exc, now=NOW + 1000).delay == 0  # a date in the past: at once, never negative


def test_an_http_date_without_now_is_ignored() -> None:
    header = email.utils.formatdate(NOW + 90, usegmt=True)
    decision = classify(ResponseError(Response(429, {"Retry-After": header})))
    assert (decision.retry, decision.delay) == (True, None)


@pytest.mark.parametrize(
    "value",
    ["soon", "", "   ", "-5", "1e3", "30s", "inf", "nan", "9" * 400, "Mon, 99 Foo 2024", -5, float("nan")],
)
def test_garbage_retry_after_falls_back_to_the_backoff(value: Any) -> None:
    decision = classify(ResponseError(Response(429, {"Retry-After": value})), now=NOW)
    assert (decision.retry, decision.delay) == (True, None)
    assert decision.reason == "HTTP 429 is rate limiting; retried with backoff"


def test_a_response_without_headers() -> None:
    assert classify(ResponseError(BareResponse(429))).delay is None
    assert classify(ResponseError(Response(429, headers=None))).delay is None


def test_headers_with_only_a_case_sensitive_get() -> None:
    class LowercaseHeaders:
        """Not a Mapping: only ``get``, and the keys are stored lowercased."""

        def get(self, key: str) -> str | None:
            return {"retry-after": "6"}.get(key)

    assert classify(StatusError(429, LowercaseHeaders())).delay == 6


def test_an_http_date_in_minus_0000_is_gmt_whatever_the_local_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    """RFC 2822's "-0000" parses to a naive datetime; it is GMT, not local time."""
    monkeypatch.setenv("TZ", "EST+5")  # POSIX form: needs no tzdata
    time.tzset()
    try:
        assert parse_retry_after(email.utils.formatdate(NOW + 15), NOW) == 15
    finally:
        monkeypatch.undo()
        time.tzset()


def test_headers_whose_get_raises_are_skipped() -> None:
    class Angry:
        def get(self, key: str) -> str:
            raise KeyError(key)

    assert classify(StatusError(429, Angry())).delay is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("30", 30.0),
        (" 30 ", 30.0),
        ("0", 0.0),
        ("1.5", 1.5),
        (b"45", 45.0),
        (10, 10.0),
        (2.5, 2.5),
        (dt.timedelta(minutes=2), 120.0),
        (dt.datetime.fromtimestamp(NOW + 60, dt.UTC), 60.0),
        (dt.datetime.fromtimestamp(NOW - 60, dt.UTC), 0.0),
        (email.utils.formatdate(NOW + 15, usegmt=True), 15.0),
        (email.utils.formatdate(NOW + 15), 15.0),  # "-0000": GMT
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),
        (dt.datetime(2030, 1, 1), None),  # naive: unknown zone
        (dt.timedelta(seconds=-1), None),
        (True, None),
        (None, None),
        (10**400, None),
        (object(), None),
    ],
)
def test_parse_retry_after(value: Any, expected: float | None) -> None:
    assert parse_retry_after(value, NOW) == expected


def test_retry_after_helper() -> None:
    assert retry_after(StatusError(429, {"Retry-After": "3"})) == 3
    assert retry_after(ValueError()) is None


# ------------------------------------------------------------------ timeouts, connections, the default


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (TimeoutError(), "a timeout"),
        (ReadTimeout(), "a timeout"),  # socket.timeout and asyncio.TimeoutError are TimeoutError now
        (ConnectionError(), "a connection error"),
        (ConnectionResetError(), "a connection error"),
        (ConnectionRefusedError(), "a connection error"),
        (BrokenPipeError(), "a connection error"),
    ],
)
def test_timeouts_and_connection_errors_retry_with_backoff(exc: BaseException, kind: str) -> None:
    decision = classify(exc)
    assert (decision.retry, decision.delay) == (True, None)
    cls = type(exc)
    name = cls.__qualname__ if cls.__module__ == "builtins" else f"{__name__}.{cls.__qualname__}"
    assert decision.reason == f"{name} is {kind}; retried with backoff"


@pytest.mark.parametrize("exc", [ValueError("x"), KeyError("k"), RuntimeError(), Broken(), OSError()])
def test_anything_else_retries_with_backoff(exc: BaseException) -> None:
    decision = classify(exc)
    assert (decision.retry, decision.delay) == (True, None)
    assert "is not classified; retried with backoff up to max_retries" in decision.reason


def test_reason_names_the_class() -> None:
    assert classify(ValueError()).reason.startswith("ValueError ")
    assert classify(Broken()).reason.startswith(f"{__name__}.Broken ")


def test_decision_is_frozen() -> None:
    decision = classify(ValueError())
    with pytest.raises(AttributeError):
        decision.retry = False  # type: ignore[misc]
