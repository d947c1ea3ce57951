"""``run_worker`` called in this process (as a test or an embedding program does): it leaves the signal
handlers as it found them, whether it returns or raises; its supervisor samples the store for the admin's
throughput chart."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from types import FrameType

import pytest

from queue_max_django.engine import QueueClosed, State
from queue_max_django.worker import run_worker
from queue_max_django.worker.launch import SpawnLauncher
from queue_max_django.worker.options import WorkerOptions
from queue_max_django.worker.startup import startup_stop

from .conftest import Site

SIGNALS = (signal.SIGTERM, signal.SIGINT)

pytestmark = pytest.mark.store_neutral  # signal handlers, whatever the store


def _ours(signum: int, frame: FrameType | None) -> None:
    raise AssertionError("the test's own handler was called")


@pytest.fixture
def own_handlers() -> Iterator[None]:
    """This test's handler on SIGTERM and SIGINT; pytest's own are put back afterwards."""
    before = {signum: signal.getsignal(signum) for signum in SIGNALS}
    for signum in SIGNALS:
        signal.signal(signum, _ours)
    yield
    for signum, handler in before.items():
        signal.signal(signum, handler)


def _options() -> WorkerOptions:
    return WorkerOptions(processes=1, burst=True, scheduler=False, shutdown_timeout=5.0, worker_id="inproc")


def test_a_burst_run_in_process_restores_the_signal_handlers(
    site: Site, own_handlers: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in site.env.items():  # the worker process (spawned) reads its settings from these
        monkeypatch.setenv(name, value)
    job_id = site.put("finish", 7)
    with site.queue() as queue:
        assert run_worker(queue, _options()) == 0
        job = queue.job(job_id)
        samples = queue._live().samples(0)  # the supervisor's sample for the throughput chart
    assert job is not None and (job.state, job.result) == (State.DONE, 7)
    assert 1 <= len(samples) <= 2  # one a minute: two if the run crossed a minute
    assert [signal.getsignal(signum) for signum in SIGNALS] == [_ours, _ours]


def test_a_run_that_raises_restores_the_signal_handlers(site: Site, own_handlers: None) -> None:
    queue = site.queue()
    queue.close()  # the supervisor's first look at the store raises
    with pytest.raises(QueueClosed):
        run_worker(queue, _options())
    assert [signal.getsignal(signum) for signum in SIGNALS] == [_ours, _ours]


def test_a_run_restores_default_handlers_too(site: Site) -> None:
    before = {signum: signal.getsignal(signum) for signum in SIGNALS}
    try:
        for signum in SIGNALS:
            signal.signal(signum, signal.SIG_DFL)
        queue = site.queue()
        queue.close()
        with pytest.raises(QueueClosed):
            run_worker(queue, _options())
        assert [signal.getsignal(signum) for signum in SIGNALS] == [signal.SIG_DFL, signal.SIG_DFL]
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


class _NoStart(SpawnLauncher):
    def start(self, index: int, options: WorkerOptions) -> None:
        raise AssertionError("a worker process was started after the stop")


def test_a_stop_during_start_up_ends_the_run_at_once_and_starts_nothing(
    site: Site, own_handlers: None
) -> None:
    with startup_stop() as stopped:
        os.kill(os.getpid(), signal.SIGTERM)  # during start-up: the event remembers it, nothing dies
        assert stopped.wait(5)
        with site.queue() as queue:
            assert run_worker(queue, _options(), _NoStart(1), stopped=stopped) == 0
    assert [signal.getsignal(signum) for signum in SIGNALS] == [_ours, _ours]
