"""``QuietStartupErrors``: while uvicorn runs the app's lifespan start-up, its ERROR records (the failed
start-up's traceback, then "Application startup failed. Exiting.") go to DEBUG instead, so that a start-up
failure reaches the operator as the one line ``wde serve: error: ...`` (``--log-level debug`` shows the
traceback)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

UVICORN_LOGGER = "uvicorn.error"
logger = logging.getLogger("wde.server")


class QuietStartupErrors(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR:
            return True
        logger.debug("uvicorn, at start-up: %s", record.getMessage(), exc_info=record.exc_info)
        return False

    @classmethod
    @contextmanager
    def installed(cls) -> Iterator[None]:
        """The filter on uvicorn's logger for the duration of the block."""
        quiet = cls()
        uvicorn_logger = logging.getLogger(UVICORN_LOGGER)
        uvicorn_logger.addFilter(quiet)
        try:
            yield
        finally:
            uvicorn_logger.removeFilter(quiet)
