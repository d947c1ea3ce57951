"""How a worker process begins: ``spawned`` (a fresh interpreter that sets Django up itself), or ``forked``
by the fork server (forkserver.py) from a process that set Django up once for all of them."""

from __future__ import annotations

import logging
import os
import traceback
from typing import Any, NoReturn

from .options import WorkerOptions
from .tally import Tally

logger = logging.getLogger("queue_max_django.worker")


def run(options: WorkerOptions, index: int, stop_event: Any, parent_pid: int, tally: Tally | None) -> int:
    """Open this process's store, work until told to stop, close the store. -> the exit code.
    ``parent_pid``: the process that started this one; when it is gone, this one stops."""
    from ..conf import get_queue
    from .logs import configure_logging
    from .process import WorkerProcess

    configure_logging(options.verbosity)
    queue = get_queue()
    worker = WorkerProcess(queue, options, index, stop_event=stop_event, parent_pid=parent_pid, tally=tally)
    worker.install_signal_handlers()
    code = worker.run()
    try:
        queue.close()
    except Exception:
        logger.exception("worker %s: closing the store failed", worker.worker_id)
    return code


def run_and_exit(
    options: WorkerOptions, index: int, stop_event: Any, parent_pid: int, tally: Tally | None
) -> NoReturn:
    """The life of a worker process once Django is set up: ``run``, then exit with its code (1 and the
    traceback on stderr if it raised, as a ``multiprocessing`` process that raised ends)."""
    code = 1
    try:
        code = run(options, index, stop_event, parent_pid, tally)
    except BaseException:
        traceback.print_exc()
    finally:
        logging.shutdown()
        os._exit(code)  # a timed-out job's thread may still run: don't wait for it


def spawned(
    options: WorkerOptions, index: int, stop_event: Any, parent_pid: int, tally: Tally | None = None
) -> None:
    """The entry point of a worker process started with spawn (where the fork server is not used)."""
    import django

    django.setup()
    run_and_exit(options, index, stop_event, parent_pid, tally)
