"""``manage.py queue_enqueue``: store jobs of a registered task, one from the options or many from a file. A
task is an ``@task`` of this app's registry or a ``django.tasks`` task whose backend is ``QueueMaxBackend``
(Django >= 6.0: ``djangotasks.py``), enqueued as its own ``enqueue()`` would."""

from __future__ import annotations

import inspect
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError, CommandParser

from ...conf import QueueMaxConfig
from ...encryption.jobs import seal_puts
from ...engine import Queue
from ...engine.codec import MAX_DEPTH, check_reads_back, pack_value
from ...engine.validate import check_put
from ...tasks import Task, registry
from .. import djangotasks
from ..base import QueueCommand
from ..common import (
    ProgressBar,
    did_you_mean,
    engine_errors,
    id_text,
    load_config,
    open_queue,
    positive_int,
    printable,
    to_json,
)

LINE_KEYS = ("task", "args", "kwargs", "priority", "delay", "queue")
SHOWN_ERRORS = 20  # bad lines listed in the error; the rest are counted


@dataclass(frozen=True)
class Call:
    """One job to store: the task with this job's options (``Task.using``), and its payload."""

    task: Task[..., Any]
    args: list[Any]
    kwargs: dict[str, Any]

    @property
    def group(self) -> tuple[str, int, str, float | None]:
        """Calls with equal groups share their put options, so one ``put_many`` can store them."""
        return self.task.name, self.task.priority, self.task.queue, self.task.delay_seconds


AnyCall = Call | djangotasks.DjangoCall


def find_task(name: str, *, listing: bool = True) -> Any:
    """The ``@task`` called ``name``, or else the ``django.tasks`` task of that module path; a
    ``CommandError`` naming close matches (and with ``listing``, every registered task) otherwise, and on a
    Django without ``django.tasks``, that such a task needs Django 6.0."""
    found = registry.get(name) or djangotasks.find(name)
    if found is not None:
        return found
    known = f" Registered tasks: {', '.join(registry.names()) or 'none'}." if listing else ""
    needs = djangotasks.missing()
    raise CommandError(f"unknown task {name!r}.{did_you_mean(name)}{known}" + (f" {needs}" if needs else ""))


class Checker:
    """Turns what the user gave into ``Call``s, or a ``ValueError`` saying what is wrong. It remembers each
    task's signature and each set of options it checked, so a file of a million lines checks fast."""

    def __init__(self, config: QueueMaxConfig, defaults: dict[str, Any]) -> None:
        self.config = config
        self.defaults = defaults  # from the options: "task" (a Task or None), "priority", "queue", "delay"
        self._signatures: dict[str, inspect.Signature] = {}
        self._variants: dict[tuple[str, str], Task[..., Any]] = {}

    def call(self, task: Any, args: Any, kwargs: Any, **options: Any) -> AnyCall:
        """A ``Call`` (a ``DjangoCall`` for a ``django.tasks`` task) if the task takes these arguments and
        ``options`` (priority, queue, delay) and the store would take the payload."""
        if not isinstance(args, list):
            raise ValueError(f"args must be a JSON list, not {_shown(json.dumps(args))}")
        if not isinstance(kwargs, dict):
            raise ValueError(f"kwargs must be a JSON object, not {_shown(json.dumps(kwargs))}")
        if not isinstance(task, Task):
            django_call = djangotasks.call(task, args, kwargs, **options)
            allowed = self.config.queues
            if allowed is not None and django_call.queue not in allowed:
                raise ValueError(
                    f"unknown queue {django_call.queue!r}: QUEUE_MAX['QUEUES'] allows {list(allowed)}"
                )
            return django_call
        signature = self._signatures.get(task.name)
        if signature is None:
            signature = self._signatures[task.name] = inspect.signature(task.func)
        try:
            signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise ValueError(f"task {task.name!r} cannot be called with these arguments: {exc}") from None
        key = (task.name, repr(sorted(options.items())))
        variant = self._variants.get(key)
        if variant is None:
            variant = self._variants[key] = self._variant(task, **options)
        payload = variant._payload(tuple(args), kwargs)
        packed = pack_value(payload, what="payload", limit=self.config.max_payload_bytes)
        if len(packed) > MAX_DEPTH:  # only then can it be nested deeper than msgpack reads back
            check_reads_back(packed, payload, "payload")
        return Call(variant, args, kwargs)

    def _variant(self, task: Task[..., Any], *, priority: Any, queue: Any, delay: Any) -> Task[..., Any]:
        if delay is not None and (
            isinstance(delay, bool) or not isinstance(delay, (int, float)) or not 0 <= delay < math.inf
        ):
            raise ValueError(f"delay must be a number of seconds >= 0, not {_shown(json.dumps(delay))}")
        variant = task.using(priority=priority, queue=queue, delay=delay)  # ValueError: bad priority, queue
        allowed = self.config.queues
        if allowed is not None and variant.queue not in allowed:
            raise ValueError(f"unknown queue {variant.queue!r}: QUEUE_MAX['QUEUES'] allows {list(allowed)}")
        # every option as the engine will judge it when the job is put (a delay past the year 9999, a task
        # name it refuses), so that a bad line is found before any line is written
        check_put(**variant._put_options(), queues=allowed, now=time.time())
        return variant

    def line(self, text: str) -> AnyCall:
        """One line of a ``--file``: a JSON object with some of ``LINE_KEYS``."""
        data = _parse_json(text)
        if not isinstance(data, dict):
            raise ValueError(
                f'expected a JSON object such as {{"task": ..., "args": [...]}}, not {_shown(text.strip())}'
            )
        unknown = sorted(set(data) - set(LINE_KEYS))
        if unknown:
            raise ValueError(f"unknown key {unknown[0]!r}: a line takes {', '.join(LINE_KEYS)}")
        task = self.defaults["task"]
        if "task" in data:
            if not isinstance(data["task"], str):
                raise ValueError(f"task must be a task name, not {_shown(json.dumps(data['task']))}")
            try:
                task = find_task(data["task"], listing=False)
            except CommandError as exc:
                raise ValueError(str(exc)) from None
        if task is None:
            raise ValueError('no "task" on this line and no --task option')
        options = {key: data.get(key, self.defaults[key]) for key in ("priority", "queue", "delay")}
        return self.call(task, data.get("args", []), data.get("kwargs", {}), **options)


def put(queue: Queue, calls: list[AnyCall], batch: int, progress: ProgressBar) -> tuple[list[int], int]:
    """Store ``calls`` as ``.map()`` does: each group of equal options in as many transactions as the store
    has shards (more when a part would pass ``batch`` jobs), on the shards in turn (``Queue.put_parts``), so
    that the workers drain them in parallel; a ``django.tasks`` job through its backend, one transaction
    each, as ``Task.enqueue()`` stores it. -> (job ids in the calls' order, transactions)."""
    groups: dict[tuple[str, int, str, float | None], list[int]] = {}
    ids = [0] * len(calls)
    transactions = 0
    for index, each in enumerate(calls):
        if isinstance(each, Call):
            groups.setdefault(each.group, []).append(index)
        else:
            ids[index] = each.enqueue()
            transactions += 1
            progress.advance(1)
    for indexes in groups.values():
        task = calls[indexes[0]].task
        assert isinstance(task, Task)
        task._prepare(queue)  # the task's rate limit and breaker, as .delay() applies them
        options = task._put_options()
        size = min(batch, -(-len(indexes) // queue.shard_count))
        for start in range(0, len(indexes), size):  # one part a call: the next shard in turn each time
            part = indexes[start : start + size]
            payloads = [task._payload(tuple(calls[i].args), calls[i].kwargs) for i in part]
            payloads, sealed = seal_puts(task, payloads, options)  # an encrypted task's: sealed
            stored = queue.put_parts(payloads, part_size=size, **sealed)
            transactions += 1
            for index, job_id in zip(part, stored, strict=True):
                ids[index] = job_id
            progress.advance(len(part))
    progress.close()
    return ids, transactions


class Command(QueueCommand):
    help = (
        "Enqueue jobs of a registered task: one from --task/--args/--kwargs, or many from --file, a "
        'JSON-lines file of objects such as {"task": "app.tasks.send", "args": [1], "kwargs": {}, '
        '"priority": 0, "delay": 0, "queue": "default"} (the options fill in what a line leaves out). '
        "Every line is checked first: if any is bad, nothing is enqueued."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        # one of --task and --file is required, or both: argparse has no group for that, so the usage says it
        parser.usage = (
            "%(prog)s --task NAME [--args JSON] [--kwargs JSON] [--priority P] [--delay SECONDS]\n"
            "       [--queue QUEUE] [--json]\n"
            "       %(prog)s --file PATH [--task NAME] [--priority P] [--delay SECONDS] [--queue QUEUE]\n"
            "       [--batch-size N] [--json]"
        )
        parser.add_argument(
            "--task",
            metavar="NAME",
            help="The task's registered name (module.function unless name= was given), or a django.tasks "
            "task's module path (Django 6.0+, its backend QueueMaxBackend).",
        )
        parser.add_argument(
            "--args",
            dest="call_args",
            metavar="JSON",
            help="The positional arguments as a JSON list, e.g. '[1, \"a\"]'.",
        )
        parser.add_argument(
            "--kwargs",
            dest="call_kwargs",
            metavar="JSON",
            help='The keyword arguments as a JSON object, e.g. \'{"to": "x"}\'.',
        )
        parser.add_argument(
            "--priority",
            type=int,
            metavar="P",
            help="From -100 to 100, higher runs first (default: the task's).",
        )
        parser.add_argument(
            "--delay", type=float, metavar="SECONDS", help="Run no sooner than this from now."
        )
        parser.add_argument(
            "--queue", metavar="QUEUE", help="The queue to put the jobs in (default: the task's)."
        )
        parser.add_argument(
            "--file",
            metavar="PATH",
            help="A JSON-lines file of jobs, one object a line ('-': standard input).",
        )
        parser.add_argument(
            "--batch-size",
            metavar="N",
            type=positive_int,
            default=10_000,
            help="Jobs per transaction with --file (default 10000).",
        )
        parser.add_argument("--json", action="store_true", help='Print {"count": N, "job_ids": [...]}.')

    def handle(self, *args: Any, **options: Any) -> None:
        task = None if options["task"] is None else find_task(options["task"])
        defaults = {"task": task, **{key: options[key] for key in ("priority", "queue", "delay")}}
        checker = Checker(load_config(), defaults)
        path = options["file"]
        if path is not None:
            if options["call_args"] is not None or options["call_kwargs"] is not None:
                raise CommandError("--args and --kwargs go without --file: each line has its own.")
            calls = self._read_file(path, checker)
        elif task is None:
            raise CommandError("say what to enqueue: --task NAME (with --args/--kwargs), or --file.")
        else:
            call_args = _json_option(options["call_args"], "--args", list, [])
            call_kwargs = _json_option(options["call_kwargs"], "--kwargs", dict, {})
            try:
                options_given = {key: defaults[key] for key in ("priority", "queue", "delay")}
                calls = [checker.call(task, call_args, call_kwargs, **options_given)]
            except ValueError as exc:
                raise CommandError(str(exc)) from None
        queue = open_queue()
        with engine_errors():
            if path is None or checker.config.immediate:  # the usual .enqueue() path, one job at a time
                ids, transactions = [_enqueue(each) for each in calls], len(calls)
            else:
                progress = ProgressBar(self.stderr, len(calls))
                ids, transactions = put(queue, calls, options["batch_size"], progress)
        if options["json"]:
            self.stdout.write(to_json({"count": len(ids), "job_ids": [id_text(each) for each in ids]}))
        elif path is None:
            name, queue_name = _where(calls[0])
            self.stdout.write(f"Enqueued job {ids[0]}: {printable(name)} on queue {queue_name!r}.")
        else:
            jobs = f"{len(ids):,} job{'' if len(ids) == 1 else 's'}"
            batches = f"{transactions:,} transaction{'' if transactions == 1 else 's'}"
            self.stdout.write(f"Enqueued {jobs} from {path} in {batches}.")

    def _read_file(self, path: str, checker: Checker) -> list[AnyCall]:
        """Every line checked; a ``CommandError`` naming the bad lines by number if there is any."""
        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"cannot read {path}: {exc}") from None
        calls: list[AnyCall] = []
        errors: list[str] = []
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    calls.append(checker.line(line))
                except ValueError as exc:
                    errors.append(f"  line {number}: {exc}")
        if errors:
            more = len(errors) - SHOWN_ERRORS
            shown = errors[:SHOWN_ERRORS] + ([f"  ... and {more} more bad lines"] if more > 0 else [])
            bad = f"{len(errors)} bad line{'' if len(errors) == 1 else 's'}"
            raise CommandError(f"{path}: {bad}, so nothing was enqueued:\n" + "\n".join(shown))
        if not calls:
            raise CommandError(f"{path} holds no jobs.")
        return calls


def _enqueue(each: AnyCall) -> int:
    """One job, as the task's own ``enqueue()`` stores it: -> its id."""
    if isinstance(each, Call):
        return each.task.enqueue(*each.args, **each.kwargs).job_id
    return each.enqueue()


def _where(each: AnyCall) -> tuple[str, str]:
    """(task name, queue) of a call, for the message."""
    if isinstance(each, Call):
        return each.task.name, each.task.queue
    return each.name, each.queue


def _parse_json(text: str) -> Any:
    """``json.loads``; a ``ValueError`` saying what is wrong, also for nesting too deep to decode (which
    ``json`` reports as a ``RecursionError``)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    except RecursionError:
        raise ValueError(
            "nested too deeply to decode: a job's arguments nest a few hundred levels at most"
        ) from None


def _shown(text: str, limit: int = 80) -> str:
    """``text`` for a message: at most ``limit`` characters."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _json_option(text: str | None, option: str, kind: type, default: Any) -> Any:
    if text is None:
        return default
    try:
        value = _parse_json(text)
    except ValueError as exc:
        raise CommandError(f"{option} is {exc}") from None  # "is not JSON: ...", "is nested too deeply ..."
    if not isinstance(value, kind):
        raise CommandError(
            f"{option} must be a JSON {'list' if kind is list else 'object'}, not {_shown(text.strip())}"
        )
    return value
