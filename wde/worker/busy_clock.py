"""The GPU's busy share: per batch, the device time from the batch's first queued work to the end of its
output copy (two CUDA events), summed, over the wall time since the clock was reset. Launch gaps inside a
batch count as busy (an upper bound of kernel time); the gaps between batches, where the GPU waits for the
host, do not."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol


class DeviceEvent(Protocol):
    """What the clock needs of ``torch.cuda.Event(enable_timing=True)``."""

    def record(self) -> None: ...

    def synchronize(self) -> None: ...

    def elapsed_time(self, end_event: DeviceEvent) -> float: ...  # milliseconds


class BusyClock:
    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.reset()

    def reset(self) -> None:
        self.busy_seconds = 0.0
        self.num_batches = 0
        self.start = self.clock()

    def add(self, start_event: DeviceEvent, end_event: DeviceEvent) -> float:
        """One batch, its events recorded around its work (the end after its outputs reached the host, so
        waiting for it costs nothing); returns its device seconds."""
        end_event.synchronize()
        seconds = start_event.elapsed_time(end_event) / 1e3
        self.busy_seconds += seconds
        self.num_batches += 1
        return seconds

    def share(self) -> float:
        """Busy seconds over wall seconds since the last reset (0 before the first batch)."""
        wall = self.clock() - self.start
        return min(1.0, self.busy_seconds / wall) if wall > 0 else 0.0
