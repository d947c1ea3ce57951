"""A worker process's own memory, for ``--max-memory`` (``WorkerProcess`` recycles a process past it)."""

from __future__ import annotations


def rss_anon_mb() -> float | None:
    """This process's anonymous resident memory in MiB (``RssAnon``: LMDB's mapped pages are not ours)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None
