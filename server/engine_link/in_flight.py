"""``InFlightSlots``: the admitted HTTP requests of every API worker, in shared memory.

Each worker writes only its own slot (the requests it admitted and has not answered); admission reads the
sum, so ``--max-concurrent-requests`` bounds the server as a whole, not each worker, and the engine process
reports the total as ``wde_http_requests_in_flight``. The slots are plain int64s without a lock: a worker's
write is one aligned store, and a sum that is one request stale costs at most one request over the bound.
"""

from __future__ import annotations

import multiprocessing
from typing import Any


class InFlightSlots:
    def __init__(self, num_workers: int, context: Any = None) -> None:
        context = context or multiprocessing.get_context("spawn")
        self._slots = context.RawArray("q", num_workers)
        self.index = -1  # this process's slot (set in each worker)

    def set(self, num_in_flight: int) -> None:
        self._slots[self.index] = num_in_flight

    def clear(self, index: int) -> None:
        """A worker that died: its requests are gone with it."""
        self._slots[index] = 0

    def total(self) -> int:
        return sum(self._slots)

    def others(self) -> int:
        """The requests the other workers hold."""
        return sum(self._slots) - self._slots[self.index]
