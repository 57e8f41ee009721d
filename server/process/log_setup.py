"""The log of wde's commands: one format, the chosen level for wde, and third-party HTTP clients (the Hub's
requests through httpx / httpx2, urllib3) at WARNING unless ``--log-level debug``: a model download or a
refused Hub id shows wde's own lines, not one line per HTTP request made on its behalf."""

from __future__ import annotations

import logging

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# loggers that write a line per HTTP request at INFO (huggingface_hub 2.x uses httpx2, 1.x httpx)
REQUEST_LOGGERS = ("httpx2", "httpx", "httpcore2", "httpcore", "urllib3")


def configure_logging(level: str) -> None:
    """``level``: one of the commands' ``--log-level`` choices (debug, info, warning, ...)."""
    logging.basicConfig(level=level.upper(), format=LOG_FORMAT)
    quiet = logging.DEBUG if level.lower() == "debug" else logging.WARNING
    for name in REQUEST_LOGGERS:
        logging.getLogger(name).setLevel(quiet)


def skip_unused_record_fields() -> None:
    """Log records without the fields ``wde serve``'s log format never prints: the caller's file and line
    (a stack walk per record), the thread, process and task names (the logging HOWTO's "Optimization").
    One access-log line per request: ~3% of a cached /embed's event-loop time. Process-wide: for
    ``wde serve``, whose format it configures, not for a process that embeds wde."""
    logging._srcfile = None  # the documented switch for the caller lookup
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    if hasattr(logging, "logAsyncioTasks"):  # Python >= 3.12
        setattr(logging, "logAsyncioTasks", False)  # noqa: B010 (not in older stubs)
