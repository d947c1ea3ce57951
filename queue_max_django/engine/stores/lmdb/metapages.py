"""The id of the last transaction committed to an LMDB environment, read from its meta pages.

``Environment.info()["last_txnid"]`` gives the same number, but py-lmdb releases and retakes the GIL around
the call and builds a dict: about 2 µs. The flow-control check asks for the control store's last
transaction on every claim and every ack (it is how a process learns that another one changed a limit or a
breaker), so this module reads the number itself, in about 0.2 µs, through a read-only shared mapping of
the first two pages of ``data.mdb`` (the page cache is shared: what any process commits is seen at once).

LMDB's file format 1 (the LMDB 0.9 that py-lmdb bundles), on a 64-bit build: the file starts with two meta
pages of the environment's page size; LMDB writes the newer of them at each commit, and the larger of their
two transaction ids is the last commit's. A meta page is a 16-byte page header, then ``MDB_meta``: the magic
number (u32), the format version (u32), the map address and size (8 bytes each), two 48-byte ``MDB_db``
records (the first one's first field holds the page size), the last page number, then the transaction id:
byte 144. A file that does not look exactly like that (another format, a 32-bit build, a file too short)
gives no reader, and the caller asks py-lmdb.
"""

from __future__ import annotations

import mmap
import os
import struct

MAGIC = 0xBEEFC0DE
FORMAT = 1
_HEADER = struct.Struct("=II")  # magic, version: at byte 16 of each meta page
_HEADER_AT = 16
_PAGE_SIZE_AT = 40  # the first MDB_db's md_pad: LMDB keeps the page size there
_TXNID_AT = 144


class MetaPages:
    """``txnid()``: the last committed transaction's id of the environment whose ``data.mdb`` this maps."""

    __slots__ = ("_first", "_map", "_second", "_words")

    def __init__(self, mapping: mmap.mmap, page_size: int) -> None:
        self._map = mapping
        self._words = memoryview(mapping).cast("Q")
        self._first = _TXNID_AT // 8
        self._second = (page_size + _TXNID_AT) // 8

    @classmethod
    def open(cls, env_dir: str) -> MetaPages | None:
        """A reader for the environment in ``env_dir``, or None where the file is not the expected format."""
        if struct.calcsize("P") != 8:
            return None
        try:
            fd = os.open(os.path.join(env_dir, "data.mdb"), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            head = os.pread(fd, _PAGE_SIZE_AT + 4, 0)
            if len(head) < _PAGE_SIZE_AT + 4 or _HEADER.unpack_from(head, _HEADER_AT) != (MAGIC, FORMAT):
                return None
            (page_size,) = struct.unpack_from("=I", head, _PAGE_SIZE_AT)
            if page_size < 512 or page_size > 65536 or page_size & (page_size - 1):
                return None
            if os.fstat(fd).st_size < 2 * page_size:
                return None
            second = os.pread(fd, 8, page_size + _HEADER_AT)
            if len(second) < 8 or _HEADER.unpack_from(second) != (MAGIC, FORMAT):
                return None
            mapping = mmap.mmap(fd, 2 * page_size, mmap.MAP_SHARED, mmap.PROT_READ)
        except (OSError, ValueError):
            return None
        finally:
            os.close(fd)  # the mapping keeps the file
        return cls(mapping, page_size)

    def txnid(self) -> int:
        words = self._words
        first, second = words[self._first], words[self._second]
        return first if first > second else second

    def close(self) -> None:
        self._words.release()
        self._map.close()
