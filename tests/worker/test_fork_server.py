"""The fork server of ``queue_worker`` (worker/forkserver.py), with real processes and real signals: the
worker processes are its children, a killed one is replaced by it, a stop during start-up ends everything
with status 0, and a supervisor killed with SIGKILL leaves nothing running for long."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from queue_max_django.engine import State

from .conftest import Site, wait_for


def parent_of(pid: int) -> int | None:
    """The parent pid of ``pid``; None once it is gone (or a zombie: it ended, only its entry is left)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text(encoding="ascii").rsplit(") ", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[1])


def children_of(pid: int) -> list[int]:
    """The live processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and parent_of(int(entry.name)) == pid:
            found.append(int(entry.name))
    return found


def fork_server_of(supervisor: int) -> int:
    """The supervisor's child that runs the same command line (forked from it): the fork server. Its other
    child, multiprocessing's resource tracker, was started with a command line of its own."""
    own = Path(f"/proc/{supervisor}/cmdline").read_bytes()
    servers = [pid for pid in children_of(supervisor) if Path(f"/proc/{pid}/cmdline").read_bytes() == own]
    assert len(servers) == 1, servers
    return servers[0]


def gone(*pids: int) -> bool:
    return all(parent_of(pid) is None for pid in pids)


def test_worker_processes_are_forked_by_the_fork_server_which_replaces_a_killed_one(site: Site) -> None:
    job_id = site.put("finish", 5)
    worker = site.start("--processes", "2", "--no-scheduler", "--worker-id", "forked")
    with site.queue() as queue:
        assert queue.wait_until_empty(60)
        job = queue.job(job_id)
        assert job is not None and (job.state, job.result) == (State.DONE, 5)  # the first job
        workers = wait_for(lambda: len(queue.workers()) == 2 and queue.workers(), what="two workers")
        server = fork_server_of(worker.proc.pid)
        assert {parent_of(w.pid) for w in workers} == {server}  # forked by it, not spawned by the supervisor
        victim = next(w for w in workers if w.worker_id == "forked/1")

        os.kill(victim.pid, signal.SIGKILL)

        def replaced() -> list[int]:
            return [w.pid for w in queue.workers() if w.worker_id == "forked/1" and w.pid != victim.pid]

        new = wait_for(replaced, what="the killed process to be replaced")
        assert parent_of(new[0]) == server
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert f"worker process 1 (pid {victim.pid}) killed by SIGKILL; starting a new one" in worker.output()
    assert "(fork server)" in worker.output()  # the banner says how processes start
    assert gone(server, *(w.pid for w in workers), new[0])


@pytest.mark.store_neutral  # the supervisor's process handling
def test_a_killed_supervisor_leaves_no_process_behind(site: Site) -> None:
    worker = site.start("--processes", "2", "--no-scheduler", "--worker-id", "orphans")
    with site.queue() as queue:
        workers = wait_for(lambda: len(queue.workers()) == 2 and queue.workers(), what="two workers")
    server = fork_server_of(worker.proc.pid)

    worker.signal(signal.SIGKILL)  # the supervisor alone: the fork server sees its socket close

    worker.wait(10)
    wait_for(lambda: gone(server, *(w.pid for w in workers)), 15, "the fork server and its children to end")
    with site.queue() as queue:
        assert queue.workers() == []  # each worker process stopped the way SIGTERM stops it


@pytest.mark.store_neutral  # a store that cannot be reached: PostgreSQL's, at an address nothing serves
def test_sigterm_while_the_store_is_awaited_exits_0_and_leaves_nothing(site: Site) -> None:
    site.env["QUEUE_MAX_TEST_PG_URL"] = "postgresql://nobody@127.0.0.1:9/nothing"  # port 9: refused
    worker = site.start("--processes", "2", "--no-scheduler")
    wait_for(lambda: "waiting for the store" in worker.output(), what="the worker to wait for its store")
    server = fork_server_of(worker.proc.pid)  # forked before the store is opened

    worker.signal(signal.SIGTERM)

    assert worker.wait() == 0
    assert "stopped while waiting for the store" in worker.output()
    assert gone(server) and children_of(worker.proc.pid) == []


@pytest.mark.store_neutral  # the supervisor's process handling
def test_when_the_fork_server_dies_its_processes_stop_and_spawned_ones_replace_them(site: Site) -> None:
    worker = site.start("--processes", "1", "--no-scheduler", "--worker-id", "fallback")
    with site.queue() as queue:
        (forked,) = wait_for(lambda: queue.workers(), what="a worker process")
        server = fork_server_of(worker.proc.pid)

        os.kill(server, signal.SIGKILL)

        def spawned() -> list[int]:
            return [w.pid for w in queue.workers() if w.pid != forked.pid]

        (pid,) = wait_for(spawned, what="a spawned replacement")
        assert parent_of(pid) == worker.proc.pid  # the supervisor's own child now
        wait_for(lambda: gone(forked.pid), 15, "the forked process to stop")
        job_id = site.put("finish", 3)
        assert queue.wait_until_empty(60)
        job = queue.job(job_id)
        assert job is not None and job.state is State.DONE
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert f"the fork server (pid {server}) is gone" in worker.output()
    assert "lost with the fork server; starting a new one" in worker.output()
