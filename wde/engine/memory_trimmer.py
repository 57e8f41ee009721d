"""``MemoryTrimmer``: gives back to the OS the heap pages that large batches leave behind, when idle.

A batch of long inputs allocates large activations; once freed, glibc keeps most of them in its arenas
(its dynamic mmap threshold moves up after the first large frees, so later large blocks come from the
heap), and the process's RSS settles at the high-water mark, not a leak. ``malloc_trim(0)`` returns those
free pages. It walks every arena (15-35 ms after a burst on this CPU), so it never runs per step: only
when the engine goes idle, after at least ``min_tokens`` tokens ran since the last trim, and at most once
per ``min_interval_seconds`` (a trim that comes too soon is deferred: ``on_idle`` says when to call again,
and the idle engine thread bounds its wait on the command queue by that). Not glibc (macOS, musl): a no-op.

Measured on an AMD EPYC CPU, bundled all-MiniLM-L6-v2, 200 inputs of 256 tokens per burst (RSS, MiB):
- ``LLM.encode``, default budget (2048 tokens), sync / async: 442 loaded; 557 / 573 idle after 3 bursts
  without trimming; 451 / 469 with it. Budget 16384 (async): 807 after 2 bursts, 459 after the trim.
- ``wde serve`` (8 clients x 8 inputs per request): 468 ready; 561-563 idle after bursts without
  trimming, 474-489 with it. With --max-num-batched-tokens 16384: 552-576 without, 545-551 with (there
  the rest is not the forward's heap: Python objects and HTTP buffers, which the trim does not return).
- Short inputs (200 x ~8 tokens): 467-480, under ``min_tokens``: no trim.
A trim costs 3-35 ms.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from wde.platforms.libc import glibc_malloc_trim

logger = logging.getLogger(__name__)

DEFAULT_MIN_TOKENS = 16384  # ~64 inputs of 256 tokens: the trim's cost stays far below the work's
DEFAULT_MIN_INTERVAL_SECONDS = 1.0


class MemoryTrimmer:
    def __init__(
        self,
        min_tokens: int = DEFAULT_MIN_TOKENS,
        min_interval_seconds: float = DEFAULT_MIN_INTERVAL_SECONDS,
        trim: Callable[[], int] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``trim`` defaults to glibc's ``malloc_trim(0)`` (looked up on first use)."""
        self.min_tokens = min_tokens
        self.min_interval_seconds = min_interval_seconds
        self._trim = trim
        self._looked_up = trim is not None
        self._clock = clock
        self._last_trim = float("-inf")
        self.num_tokens_since_trim = 0
        self.num_trims = 0

    def note_tokens(self, num_tokens: int) -> None:
        """Count the tokens of a scheduled batch (engine thread, every step: cheap)."""
        self.num_tokens_since_trim += num_tokens

    def on_idle(self) -> float | None:
        """The engine has nothing to run: trim if enough work ran since the last trim. Returns None, or
        the seconds after which to call again when the trim is due but too soon after the last one."""
        if self.num_tokens_since_trim < self.min_tokens:
            return None
        now = self._clock()
        wait_seconds = self._last_trim + self.min_interval_seconds - now
        if wait_seconds > 0:
            return wait_seconds
        if not self._looked_up:
            self._trim, self._looked_up = glibc_malloc_trim(), True
        self.num_tokens_since_trim = 0
        self._last_trim = now
        if self._trim is not None:
            start = time.perf_counter()
            self._trim()
            self.num_trims += 1
            logger.debug("malloc_trim after idle: %.1f ms", (time.perf_counter() - start) * 1e3)
        return None
