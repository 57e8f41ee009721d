"""``BatchForming``: before a step, wait a few milliseconds for the clients the last step answered, when
the traffic shows that they come back.

Many clients are closed loops: each sends its next request once it has its answer (benchmarks, indexing
pipelines, a RAG service's workers). With C of them and a forward pass that cannot be interrupted, the
engine settles into two alternating halves: the C/2 requests that arrived during a step run as the next
step while the other half is being answered and sends again. Batches stay at C/2, and a small batch
costs more CPU per text (2 cores, bundled MiniLM, one short query per request, concurrency 32: batches
of ~15 cost 7.4 server CPU-ms per request, batches of ~28 5.7, and serve 1.24x the requests/s; one
interleaved run, docs/benchmarks.md).

After a step that finished ``F`` requests, with ``W`` waiting (or submitted while it ran), the next step
is held while
1. fewer than ``F + W`` requests wait (every answered client came back), capped by what one step takes
   (``max_num_seqs``; the token budget at the last step's tokens per request),
2. the step ended less than ``min(max_wait_seconds, MAX_WAIT_FRACTION x its duration)`` ago, and
3. the clients are closed loops: their requests bunch up after step ends. Over the recent steps, the
   share of arrivals that came within ``max_wait_seconds`` of a step's end is compared with the share of
   time those windows cover; with open-loop traffic (requests that come when they come) the two are
   equal, so a hold would only add latency; at ``MIN_CONCENTRATION`` times or more, it holds.
A lone client's next request is never held (it is the ``F + W`` = 1 it waits for), nor are fast steps
(windows as long as the cycle: no concentration). ``max_wait_seconds=0`` turns holds off. The engine loop
(``EngineThread``) asks ``hold_seconds`` before each step and waits that long for new requests; the
in-process ``LLM`` queues all its inputs at once and never asks.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

MAX_WAIT_FRACTION = 0.3  # of the last step's duration: a hold's worst-case share of a step's latency
MIN_CONCENTRATION = 1.5  # arrivals' share in the post-step windows / the windows' share of time
DECAY = 0.9  # per step, of the arrival statistics (about the last 10 steps count)


@dataclass
class Cycle:
    """From one step's end to the next: the arrivals in it, and those within the window after its start."""

    start: float
    num_arrivals: int = 0
    num_in_window: int = 0


class BatchForming:
    def __init__(
        self,
        max_wait_seconds: float,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        clock: Callable[[], float],
    ) -> None:
        self.max_wait_seconds = max_wait_seconds
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self._clock = clock
        self._step_start = -math.inf
        self._num_tokens_per_request = 1.0  # the last step's mean (the budget's share of one request)
        self._target = 0  # requests worth waiting for (0: none)
        self._deadline = -math.inf
        # the arrival statistics (3. above): the cycle that ended at the last step end (its arrivals are
        # all known once the step after it ended: they were submitted before that step was scheduled)
        # and the one open since; decayed sums over the cycles folded so far
        self._previous: Cycle | None = None
        self._current: Cycle | None = None
        self._arrivals = 0.0
        self._in_window = 0.0
        self._seconds = 0.0
        self._window_seconds = 0.0

    @property
    def concentration(self) -> float:
        """(share of arrivals within a window after a step end) / (share of time such windows cover)."""
        if not self._arrivals or not self._window_seconds:
            return 0.0
        return (self._in_window / self._arrivals) / (self._window_seconds / self._seconds)

    def note_step_start(self, num_scheduled: int, num_scheduled_tokens: int) -> None:
        """A step was scheduled (every step, also one that runs nothing)."""
        self._step_start = self._clock()
        if num_scheduled:
            self._num_tokens_per_request = max(1.0, num_scheduled_tokens / num_scheduled)

    def note_step_end(self, num_finished: int, num_waiting: int) -> None:
        """The step's results are back: ``num_finished`` requests answered, ``num_waiting`` queued."""
        if self.max_wait_seconds <= 0:
            return
        now = self._clock()
        if self._previous is not None and self._current is not None:
            self._fold(self._previous, end=self._current.start)
        self._previous, self._current = self._current, Cycle(now)
        self._target = num_finished + num_waiting if num_finished else 0
        max_wait = min(self.max_wait_seconds, MAX_WAIT_FRACTION * max(0.0, now - self._step_start))
        self._deadline = now + max_wait

    def note_arrival(self, arrival_time: float) -> None:
        """A request was queued (``arrival_time``: when it was submitted, on the clock's scale). One
        submitted before the last step ended waited in the engine loop's command queue while the step ran:
        it is one of the ``W`` already there, not a returning client."""
        if self._current is None:
            return
        cycle = self._current
        if arrival_time <= cycle.start:
            if self._target:
                self._target += 1
            cycle = self._previous  # type: ignore[assignment]
            if cycle is None or arrival_time <= cycle.start:
                return
        cycle.num_arrivals += 1
        if arrival_time <= cycle.start + self.max_wait_seconds:
            cycle.num_in_window += 1

    def hold_seconds(self, num_waiting: int) -> float:
        """Seconds to wait for more requests before the next step (0: step now)."""
        fits = int(self.max_num_batched_tokens // self._num_tokens_per_request)
        if num_waiting >= min(self._target, self.max_num_seqs, max(1, fits)):
            return 0.0
        if self.concentration < MIN_CONCENTRATION:
            return 0.0
        return max(0.0, self._deadline - self._clock())

    def _fold(self, cycle: Cycle, end: float) -> None:
        seconds = end - cycle.start
        self._arrivals = DECAY * self._arrivals + cycle.num_arrivals
        self._in_window = DECAY * self._in_window + cycle.num_in_window
        self._seconds = DECAY * self._seconds + seconds
        self._window_seconds = DECAY * self._window_seconds + min(self.max_wait_seconds, seconds)
