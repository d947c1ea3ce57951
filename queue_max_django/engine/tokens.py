"""Lease tokens: the 16 bytes that tell one claim of a job from every other, so that a holder whose lease
was lost (and the job claimed again) can no longer ack, nack, release or renew it.

A token must never repeat; it need not be secret (whoever can write the store can do anything to it). Each
process takes 8 random bytes once (again in a forked child) and counts: a claim costs no system call, where
``os.urandom(16)`` cost one per claim (``getrandom``), on every store.
"""

from __future__ import annotations

import itertools
import os
import struct

_COUNT = struct.Struct("<Q")
_prefix = b""
_counter = itertools.count(1)


def _reseed() -> None:
    global _prefix, _counter
    _prefix, _counter = os.urandom(8), itertools.count(1)


_reseed()
os.register_at_fork(after_in_child=_reseed)


def new_token() -> bytes:
    """A lease token never handed out before by any process (a per-process random prefix and a count)."""
    return _prefix + _COUNT.pack(next(_counter) & 0xFFFF_FFFF_FFFF_FFFF)
