"""The worker's log lines: ``-v 0`` warnings and errors, ``-v 1`` also the banner and throughput lines,
``-v 2`` also one line per job, ``-v 3`` debug."""

from __future__ import annotations

import logging
import sys

LEVELS = {0: logging.WARNING, 1: logging.INFO, 2: logging.INFO, 3: logging.DEBUG}
FORMAT = "%(asctime)s %(levelname)s [%(process)d] %(message)s"


def configure_logging(verbosity: int) -> None:
    """Send the package's log records to stderr at the level ``verbosity`` asks for, unless the project's
    LOGGING already gave the ``queue_max_django`` logger a handler."""
    logger = logging.getLogger("queue_max_django")
    logger.setLevel(LEVELS.get(verbosity, logging.DEBUG))
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(FORMAT))
        logger.addHandler(handler)
        logger.propagate = False
