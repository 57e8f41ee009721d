"""``ForwardClock``: when the running forward pass started, readable from any thread (the watchdog's view)."""

from __future__ import annotations

import time
from types import TracebackType


class ForwardClock:
    """``with clock:`` around each forward pass; ``running_seconds()`` from any thread says how long the
    current one has run (0.0 between passes). One float attribute, written by the forward's thread only."""

    def __init__(self) -> None:
        self._started: float | None = None

    def __enter__(self) -> ForwardClock:
        self._started = time.monotonic()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._started = None

    def running_seconds(self) -> float:
        started = self._started  # read once: the forward's thread may clear it meanwhile
        return 0.0 if started is None else time.monotonic() - started
