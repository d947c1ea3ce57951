"""The keys and the encoding of the LMDB store's node entries (``workflows.py`` says what each holds),
shared by ``workflows.py``, ``workflow_checks.py`` and ``workflow_rewrite.py``."""

from __future__ import annotations

import struct
from typing import Any

import msgpack

from .layout import pack_record

_NODE = struct.Struct(">QI")


def _node_key(workflow_id: int, index: int) -> bytes:
    return b"N" + _NODE.pack(workflow_id, index)


def _state_key(workflow_id: int, index: int) -> bytes:
    return b"S" + _NODE.pack(workflow_id, index)


def _pack(value: Any) -> bytes:
    return pack_record(value)  # the thread's packer: twice as fast as ``packb``, which builds one a call


def _unpack(raw: bytes) -> Any:
    return msgpack.unpackb(raw, raw=False, strict_map_key=False)
