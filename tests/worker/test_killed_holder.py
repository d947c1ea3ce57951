"""What a supervisor shares with its worker processes (the stop flag, the tally of what they did) survives
a worker process SIGKILLed at any instant: nothing is left held that the others, or the supervisor, would
wait on for ever.

A ``multiprocessing.Event`` and a locked ``Array`` did not: a worker process killed while it held their
process-shared lock (it looks at the stop flag ten times a second and counts every job) left it held, and
every other worker thread then hung at its next count, and the supervisor at its closing line (the chaos run
found it: a stall after its first SIGKILL of a worker process). Here real child processes hammer both, and
are SIGKILLed mid-stride, again and again.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
import warnings
from typing import Any

from queue_max_django.worker.stopflag import StopFlag
from queue_max_django.worker.tally import Tally

KILLS = 40
BOUND = 10.0  # seconds: every wait here is bounded


def _hammer(tally: Tally, flag: StopFlag, index: int) -> None:
    """A worker process's uses of both, as fast as it can, until it is killed (or told to stop)."""
    while not flag.is_set():
        tally.add(index, "done")


def _start(process: Any) -> None:
    """Fork ``process``. The test process may run threads of other tests (a store's upkeep): the child only
    runs ``_hammer``, which takes none of their locks, so the fork-with-threads warning is no concern."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # "multi-threaded, use of fork() may deadlock"
        process.start()


def _bounded(call: Any) -> tuple[bool, Any]:
    """Run ``call`` in a thread: (whether it returned within BOUND seconds, what it returned)."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    thread.join(BOUND)
    return (not thread.is_alive(), result[0] if result else None)


def _done(tally: Tally) -> int:
    returned, counts = _bounded(tally.counts)  # as the supervisor reads it for its closing line
    assert returned, "reading the tally hung: a killed process left its lock held"
    return int(counts["done"])


def test_worker_processes_killed_mid_count_leave_nothing_held() -> None:
    context = multiprocessing.get_context("fork")  # as the fork server starts worker processes
    tally, flag = Tally(context, 2), StopFlag(context)
    survivor = context.Process(target=_hammer, args=(tally, flag, 1), daemon=True)
    _start(survivor)
    try:
        for _ in range(KILLS):
            before = _done(tally)
            victim = context.Process(target=_hammer, args=(tally, flag, 0), daemon=True)
            _start(victim)
            deadline = time.monotonic() + BOUND
            while _done(tally) < before + 2_000 and time.monotonic() < deadline:
                time.sleep(0.01)  # both count: the victim is mid-stride
            os.kill(victim.pid, signal.SIGKILL)
            victim.join(BOUND)
            assert victim.exitcode == -signal.SIGKILL

        going = _done(tally)
        assert going >= KILLS * 2_000
        deadline = time.monotonic() + BOUND
        while _done(tally) < going + 1_000 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _done(tally) >= going + 1_000, "the surviving process stopped counting"

        assert _bounded(flag.set)[0], "setting the stop flag hung"  # the supervisor's signal handler
        survivor.join(BOUND)
        assert survivor.exitcode == 0  # it saw the flag and returned
    finally:
        if survivor.is_alive():
            survivor.kill()
            survivor.join(BOUND)


def test_a_tally_counts_each_process_in_its_own_row_and_adds_them_up() -> None:
    tally = Tally(multiprocessing.get_context("spawn"), 3)
    for index, kind in [(0, "done"), (2, "done"), (2, "dead"), (1, "retried"), (1, "waiting")]:
        tally.add(index, kind)

    assert tally.counts() == {"done": 2, "retried": 1, "dead": 1, "waiting": 1, "cancelled": 0}
    assert list(tally._counts) == [1, 0, 0, 0, 0, 0, 1, 0, 1, 0, 1, 0, 1, 0, 0]  # a row per process
