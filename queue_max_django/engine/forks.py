"""Which fork of the process this is: a number that changes in a child after ``fork()``.

Handles (LMDB environments, descriptors watched by inotify, the wake file's writer) belong to the process
that opened them. Code that keeps such handles compares the generation it saw when it opened them with the
current one, instead of calling ``os.getpid()`` (a system call) on every operation.
"""

from __future__ import annotations

import os

_generation = [0]


def _forked() -> None:
    _generation[0] += 1


os.register_at_fork(after_in_child=_forked)


def fork_generation() -> int:
    """0 in a process that was not forked from one that imported this module; +1 in each forked child."""
    return _generation[0]
