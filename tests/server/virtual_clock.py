"""``VirtualTimeLoop``: an asyncio event loop whose clock stands still while anything is ready and jumps
to the next timer when nothing is, so that a test of timeouts, loads and waits of seconds runs in
milliseconds, sleeps nothing and measures exact durations. Only for code that waits on the loop
(``asyncio.sleep``, ``wait_for``, events): real I/O and threads do not move its clock."""

from __future__ import annotations

import asyncio
import selectors
from typing import Any


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        super().__init__(_JumpingSelector(self))

    def time(self) -> float:
        return self.now


class _JumpingSelector(selectors.DefaultSelector):
    """Polls without blocking; where the loop would block ``timeout`` seconds, moves its clock instead."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, Any]]:
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            raise RuntimeError("deadlock: every task waits and no timer is set")
        self._loop.now += timeout
        return []
