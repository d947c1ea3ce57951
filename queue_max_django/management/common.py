"""What the maintenance commands share: opening the store, reading options, and printing tables and JSON."""

from __future__ import annotations

import argparse
import base64
import dataclasses
import difflib
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import CommandError, OutputWrapper

from ..conf import NoStore, QueueMaxConfig, get_config, get_queue
from ..engine import Job, Queue, QueueError, State
from ..engine.job import utc_datetime
from ..tasks import Task, registry

STATES = tuple(state.value for state in State)
# The words the admin's pages call states by, which --status takes too (in any case; "-", "_" or a space
# between words): "waiting" jobs are pending ones, "dead letters" failed ones.
SCREEN_WORDS: dict[str, State] = {
    "waiting": State.PENDING,
    "dead letters": State.FAILED,
    "dead letter": State.FAILED,
}
STATUS_HELP = f"a job state: one of {', '.join(STATES)} (or as the admin says them: waiting, dead-letters)"


def parse_status(value: str | None, *, option: str = "--status") -> State:
    """``--status`` as a ``State`` (its value, or the admin's word for it); a ``CommandError`` naming the
    valid values otherwise."""
    if value is None:
        raise CommandError(f"{option} is required: {STATUS_HELP}.")
    word = " ".join(value.strip().lower().replace("-", " ").replace("_", " ").split())
    state = SCREEN_WORDS.get(word)
    if state is not None:
        return state
    try:
        return State(word)
    except ValueError:
        raise CommandError(
            f"unknown status {value!r}: use one of {', '.join(STATES)} (or waiting, dead-letters)."
        ) from None


def status_missing(options: dict[str, Any]) -> str | None:
    """``QueueCommand.missing`` of a command whose ``--status`` is required."""
    return f"--status is required: {STATUS_HELP}." if options["status"] is None else None


def find_task(name: str, *, listing: bool = True) -> Task[..., Any]:
    """The registered task called ``name``; a ``CommandError`` naming close matches (and with ``listing``,
    every registered task) otherwise."""
    found = registry.get(name)
    if found is not None:
        return found
    known = f" Registered tasks: {', '.join(registry.names()) or 'none'}." if listing else ""
    raise CommandError(f"unknown task {name!r}.{did_you_mean(name)}{known}")


def did_you_mean(name: str) -> str:
    """`` Did you mean 'app.tasks.send', ...?`` naming up to three registered tasks close to ``name`` (those
    whose name ends in ``.name`` first); ``""`` when none is close."""
    names = registry.names()
    close = [n for n in names if n.endswith("." + name)]
    close += [n for n in difflib.get_close_matches(name, names, n=3, cutoff=0.6) if n not in close]
    return f" Did you mean {', '.join(repr(n) for n in close[:3])}?" if close else ""


def unknown_task_warning(name: str | None, what: str) -> str | None:
    """For a ``--task`` filter that matched nothing (``what``: ``"failed jobs"``): a warning naming close
    registered tasks when ``name`` is no registered task either, so a typo does not pass for "none";
    None when it is one, or when no name was given. A name that is not registered is still a valid filter
    (jobs of a task this process does not know, such as an old one), so this is never an error."""
    if name is None or registry.get(name) is not None:
        return None
    return f"no task {name!r} is registered in this process and no {what} matched.{did_you_mean(name)}"


def load_config() -> QueueMaxConfig:
    """The ``QUEUE_MAX`` config (opens no store); a ``CommandError`` when the settings are wrong."""
    try:
        return get_config()
    except ImproperlyConfigured as exc:
        raise CommandError(str(exc)) from exc


def open_queue(*, create: bool = True) -> Queue:
    """This process's queue (``conf.get_queue()``); ``CommandError`` when the settings or store are wrong.

    ``create=False``, for the commands that only read: where the settings' LMDB directory holds no store (a
    restore to another path, a volume not mounted), a ``CommandError`` "no store at PATH", and nothing is
    created there (opening would make a new, empty store and report it healthy). The PostgreSQL store never
    makes its tables when it opens: a database without them is a ``CommandError`` naming ``migrate``."""
    with engine_errors():
        try:
            return get_queue(create=create)
        except (ImproperlyConfigured, NoStore) as exc:
            raise CommandError(str(exc)) from exc


@contextmanager
def engine_errors() -> Iterator[None]:
    """Engine errors (bad input, a store that cannot be opened) become ``CommandError``s with their text."""
    try:
        yield
    except QueueError as exc:
        raise CommandError(str(exc)) from exc


def check_shard(queue: Queue, shard: int | None) -> None:
    if shard is not None and not 0 <= shard < queue.shard_count:
        raise CommandError(
            f"--shard must be from 0 to {queue.shard_count - 1}: this store has "
            f"{queue.shard_count} shards, not {shard}."
        )


# ---------------------------------------------------------------------------------------- argument types


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


MAX_JOB_ID = (1 << 64) - 1
"""Job ids are unsigned 64-bit integers (``sequence << 8 | shard``)."""


def job_id(text: str) -> int:
    """A job id as the commands take it: its digits, also in the double quotes that ``--json`` output
    writes around it (``"459766814235994624"``, as ``jq`` prints it without ``-r``), white space around
    it allowed. Anything else is an ``argparse.ArgumentTypeError`` saying what a job id is."""
    digits = text.strip()
    if len(digits) >= 2 and digits[0] == digits[-1] == '"':
        digits = digits[1:-1]
    if digits.isascii() and digits.isdigit() and len(digits) <= len(str(MAX_JOB_ID)):
        value = int(digits)
        if 0 < value <= MAX_JOB_ID:
            return value
    raise argparse.ArgumentTypeError(
        f"{text!r} is not a job id: a job id is a whole number from 1 to {MAX_JOB_ID} (as queue_list "
        f"prints it; the double quotes of --json output may stay)"
    )


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value


def non_negative_float(text: str) -> float:
    value = float(text)
    if not 0 <= value < float("inf"):
        raise ValueError(text)
    return value


# ---------------------------------------------------------------------------------------- printing


def when(seconds: float | None) -> str:
    """Unix seconds as ``YYYY-MM-DD HH:MM:SS`` UTC; ``-`` for None and for a time that no datetime can hold
    (a row edited past the engine: year 287168), as the admin shows it (``utc_datetime``)."""
    moment = utc_datetime(seconds)
    return "-" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Rows under headers, in columns two spaces apart: numbers right-aligned, text left-aligned."""
    cells = [[_cell(value) for value in row] for row in rows]
    widths = [max([len(h), *(len(row[i]) for row in cells)]) for i, h in enumerate(headers)]
    numeric = [bool(rows) and all(_is_number(row[i]) for row in rows) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers), *(line(row) for row in cells)])


def jobs_table(jobs: Sequence[Any]) -> str:
    """Jobs found by what they are about (``queue_list --tag``, ``--where``), a row each with their tags."""
    headers = ["ID", "STATE", "QUEUE", "TASK", "ENQUEUED (UTC)", "TAGS"]
    rows = [[job.job_id, job.state.value, job.queue, job.name, when(job.enqueued_at), " ".join(job.tags)]
            for job in jobs]  # fmt: skip
    return table(headers, rows)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}"
    return printable(str(value))


def printable(text: str) -> str:
    """``text`` safe for an operator's terminal: every character that is not printable (a control
    character such as newline, ESC or BEL; a lone surrogate; an invisible format character) as its Python
    escape (``\\n``, ``\\x1b``, ``\\u200b``). Names are checked when they are stored, but a store written
    by an earlier version may hold such names, and errors are any text. Costs one ``isprintable()`` for
    ordinary text."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def to_json(value: Any) -> str:
    """One JSON document; bytes become ``"base64:..."``, tuples lists, anything else its ``str``."""
    return json.dumps(value, default=_json_default, ensure_ascii=False)


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return "base64:" + base64.b64encode(value).decode("ascii")
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    return str(value)


def id_text(job_id: int | None) -> str | None:
    """A job id as JSON output writes it: a string, because ids pass 2**53 and JavaScript and ``jq`` read
    every JSON number as a double (``459766814235994627`` comes back as ``459766814235994600``)."""
    return None if job_id is None else str(job_id)


def readable_job(job: Job, decrypt: bool) -> Job:
    """``job`` as a command prints it: an encrypted job's data ``(encrypted)``, or with ``decrypt``
    (``--decrypt``) opened (``encryption/jobs.py``); a ``CommandError`` to decrypt without a key."""
    from ..encryption.jobs import readable
    from ..encryption.keys import EncryptionNotConfigured

    try:
        return readable(job, decrypt)
    except EncryptionNotConfigured as exc:
        raise CommandError(str(exc)) from None


def job_dict(job: Job) -> dict[str, Any]:
    """A job as JSON-ready data: every field of ``Job`` plus its ``shard``, ``attempts_allowed`` and
    ``cancelled`` (``Job.cancelled``); the name is its ``task``, the id a string (``id_text``)."""
    data = {field.name: getattr(job, field.name) for field in dataclasses.fields(job)}
    data["job_id"] = id_text(job.job_id)
    data["task"] = data.pop("name")
    data["state"] = job.state.value
    data["shard"] = job.shard
    data["attempts_allowed"] = job.max_retries + 1  # the first and max_retries more (as the admin counts)
    data["cancelled"] = job.cancelled  # a dead letter that is a cancel (who and when: metadata "_cancel")
    data["tags"] = list(job.tags)  # what it was put with (metadata "_tags": engine/tags.py)
    return data


class ProgressBar:
    """``[#####.....]  50%  500/1,000`` redrawn in place on ``stream``, only when it is a terminal."""

    WIDTH = 30

    def __init__(self, stream: OutputWrapper, total: int) -> None:
        self.stream, self.total, self.done = stream, total, 0
        self.enabled = total > 0 and stream.isatty()

    def advance(self, count: int) -> None:
        self.done += count
        if self.enabled:
            filled = self.WIDTH * self.done // self.total
            bar = "#" * filled + "." * (self.WIDTH - filled)
            percent = 100 * self.done // self.total
            self.stream.write(f"\r[{bar}] {percent:3d}%  {self.done:,}/{self.total:,}", ending="")
            self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("")
