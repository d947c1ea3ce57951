"""``QueueCommand``, the base of the ``queue_*`` commands: output to a reader that has gone (``queue_stats |
head``) ends the command quietly with status 0, and a missing required option is named as exactly as the
options that were given allow (``--shard`` without ``--all``) while the usage line still shows it required."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TextIO

from django.core.checks import Tags
from django.core.management.base import BaseCommand, CommandParser, OutputWrapper

from ..conf.checks import TAG


class OutputClosed(Exception):
    """The reader of the command's standard output has gone: the other end of a pipe was closed
    (``queue_stats | head``)."""


class PipeOutput(OutputWrapper):
    """Django's ``OutputWrapper``, but a write or flush to a reader that has gone raises ``OutputClosed``
    (a ``BrokenPipeError`` of this stream, which no other broken pipe, of a socket or of a worker process,
    can be mistaken for)."""

    def write(  # type: ignore[override]  # django-stubs' own override of TextIOBase.write
        self, msg: str = "", style_func: Callable[[str], str] | None = None, ending: str | None = None
    ) -> None:
        try:
            super().write(msg, style_func, ending)
        except BrokenPipeError as exc:
            raise OutputClosed from exc

    def flush(self) -> None:
        try:
            super().flush()
        except BrokenPipeError as exc:
            raise OutputClosed from exc

    def discard(self) -> None:
        """Point the stream's file descriptor (if it has one) at ``/dev/null``: what is still buffered, and
        the flush of standard output at the interpreter's exit, then go nowhere instead of failing again
        (which Python reports as "Exception ignored ... BrokenPipeError" and exit status 120)."""
        try:
            fd = self.fileno()
        except (AttributeError, OSError, ValueError):  # a StringIO (call_command), a closed file
            return
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, fd)
        finally:
            os.close(devnull)


class QueueCommand(BaseCommand):
    """A ``queue_*`` command. Its ``handle`` writes to ``self.stdout`` as usual; when the reader goes away
    (``| head``), the command stops where it is and ends with status 0, printing nothing more. A command
    that changes the store does so before it prints, so a closed pipe does not cut a change short.

    A command whose required options depend on each other overrides ``missing``.

    Before it runs it runs the system checks that concern it (``requires_system_checks``): the models' and
    this app's own (``QUEUE_MAX``, the store, the metrics URL), not those of the admin, templates, URLs or
    security settings, which cost a command's start-up more than all of its own work (``manage.py check``
    runs every check)."""

    requires_system_checks = [Tags.models, TAG]

    def __init__(
        self,
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
        no_color: bool = False,
        force_color: bool = False,
    ) -> None:
        super().__init__(stdout, stderr, no_color, force_color)
        self.stdout = PipeOutput(stdout or sys.stdout)

    def execute(self, *args: Any, **options: Any) -> str | None:
        stdout = options.pop("stdout", None)  # call_command(stdout=...): BaseCommand would wrap it its way
        if stdout:
            self.stdout = PipeOutput(stdout)
        output = self.stdout
        try:
            result = super().execute(*args, **options)
            output.flush()  # now, not at the interpreter's exit, where a closed pipe is an error
        except OutputClosed:
            if isinstance(output, PipeOutput):
                output.discard()
            return None
        return result

    def missing(self, options: dict[str, Any]) -> str | None:
        """What required option ``options`` (parsed with nothing required) lack, said for the options given;
        None when nothing is missing. Asked only when argparse refused the arguments; it still checks what
        is required (and the usage line shows it so), this only says it better."""
        return None

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        if type(self).missing is not QueueCommand.missing:
            parse_args = parser.parse_args

            def explained(args: Sequence[str] | None = None, namespace: Any = None) -> Any:
                parser.error = _refuse  # type: ignore[method-assign]
                try:
                    return parse_args(args, namespace)
                except _Refused as refused:
                    message = str(refused)
                finally:
                    del parser.error  # the class's again: exits, or raises CommandError under call_command
                parser.error(self.missing(vars(_parse_relaxed(parser, args))) or message)

            parser.parse_args = explained  # type: ignore[assignment,method-assign]
        return parser


class _Refused(Exception):
    """argparse refused the arguments (the message of its ``error()``)."""


def _refuse(message: str) -> NoReturn:
    raise _Refused(message)


def _parse_relaxed(parser: argparse.ArgumentParser, args: Sequence[str] | None) -> argparse.Namespace:
    """``args`` parsed with no option and no group of options required (any other mistake is reported as
    usual)."""
    options: list[Any] = [action for action in parser._actions if action.option_strings]
    required = [item for item in (*options, *parser._mutually_exclusive_groups) if item.required]
    for item in required:
        item.required = False
    try:
        given, _ = parser.parse_known_args(args)
    finally:
        for item in required:
            item.required = True
    return given
