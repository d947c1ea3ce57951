"""What the commands and the admin share about pausing (the engine's ``Queue.pause``/``resume``): reading a
duration ("90", "30s", "15m", "2h", "1d", "1h30m"), who a command runs as, and the warnings for a target
that looks like a typo.

A queue that never had a job and that no setting or registered task names is paused all the same, with a
warning: a pause made before the queue's first job (a new deployment, a queue fed from elsewhere) is a
legitimate use, and refusing it would make it impossible. A name that cannot be a queue's (empty, too long,
control characters) is an error, and so is a queue outside ``QUEUE_MAX["QUEUES"]`` when it is set (the
engine's ``UnknownQueue``). A ``--task`` that no task of this process is registered under is a warning too
(a task of another deployment's code may still come).
"""

from __future__ import annotations

import getpass
import math
import re
import socket
from collections.abc import Iterable

from ..conf import get_config
from ..engine import Queue
from ..engine.throughput import enqueued_totals
from ..engine.validate import MAX_SECONDS
from ..tasks import registry

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
DURATION_HELP = 'a number of seconds, or with units: "30s", "15m", "2h", "1d", "1h30m"'


def parse_duration(text: str) -> float:
    """``text`` as seconds above 0; ``ValueError`` saying what a duration is otherwise."""
    cleaned = text.strip().lower().replace(" ", "")
    seconds = math.nan
    if re.fullmatch(r"\d+(?:\.\d+)?", cleaned):
        seconds = float(cleaned)
    elif cleaned and re.fullmatch(rf"(?:{_PART.pattern})+", cleaned):
        seconds = sum(float(number) * UNITS[unit] for number, unit in _PART.findall(cleaned))
    if not 0 < seconds <= MAX_SECONDS:
        raise ValueError(f"{text!r} is not a duration above 0 and at most a century: give {DURATION_HELP}")
    return seconds


def command_author(command: str) -> str:
    """Who a command pauses as: ``"queue_pause command (alice@web-1)"``, the OS user and the host."""
    try:
        user = getpass.getuser()
    except Exception:  # no user name in this environment (a container without a passwd entry)
        user = "unknown user"
    return f"{command} command ({user}@{socket.gethostname()})"


def known_queues(queue: Queue) -> set[str]:
    """The queues that a pause of is no typo: every queue the store ever had a job in (or has one), the
    configured ``QUEUES``, and the queues of the registered tasks."""
    names = set(enqueued_totals(queue)) | set(queue.queue_counts())
    configured = get_config().queues
    if configured is not None:
        names.update(configured)
    for name in registry.names():
        task = registry.get(name)
        found = getattr(task, "queue", None)
        if isinstance(found, str):
            names.add(found)
    return names


def warnings(queue: Queue, queues: Iterable[str], task: str | None) -> list[str]:
    """What looks like a typo in a pause of ``queues`` (and ``task``): said, never refused (module
    docstring)."""
    said = []
    known = known_queues(queue)
    for name in queues:
        if name not in known:
            said.append(
                f"queue {name!r} has never had a job and no setting or registered task names it: paused "
                f"anyway (its jobs will wait when they come). Check the name if that is not what you meant."
            )
    if task is not None and registry.get(task) is None:
        said.append(f"no task {task!r} is registered in this process: paused anyway (check the name).")
    return said
