"""Priority scheduler, FCFS within a priority: tokenizes a lookahead window lazily, then admits requests while
the budget allows. Waiting interactive requests always go before waiting batch (lower-priority) ones."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import islice

from wde.config import SchedulerConfig
from wde.engine.batch_forming import BatchForming
from wde.engine.request_processor import RequestProcessor
from wde.engine.token_budget import TokenBudget
from wde.request import PRIORITY_INTERACTIVE, Request, RequestStatus

# A forward pass cannot be interrupted, so an interactive request that arrives while batch work runs waits
# for it. So:
# 1. a step runs requests of one priority only (an interactive step is as short as when idle);
# 2. while interactive requests keep arriving (one within INTERACTIVE_WINDOW_SECONDS) a lower-priority step
#    carries at most max_num_batched_tokens // LOW_PRIORITY_STEP_DIVISOR tokens (at least one request);
# 3. hold-off: lower-priority work does not start while an interactive step runs nor for
#    INTERACTIVE_HOLD_SECONDS after one finished (a client that got its answer sends its next request
#    within a few ms; without the hold that request finds a batch step just started), but a lower-priority
#    queue held for MAX_LOW_PRIORITY_HOLD_SECONDS runs one step anyway, so a busy client never starves it.
# Without interactive traffic batch work fills the budget.
INTERACTIVE_WINDOW_SECONDS = 1.0
LOW_PRIORITY_STEP_DIVISOR = 32
INTERACTIVE_HOLD_SECONDS = 0.005
MAX_LOW_PRIORITY_HOLD_SECONDS = 0.1


@dataclass
class SchedulerOutput:
    scheduled_requests: list[Request] = field(default_factory=list)
    # Requests that failed before running (e.g. too long with truncation off): answered now.
    failed_requests: list[Request] = field(default_factory=list)
    num_tokenized: int = 0  # requests tokenized by this step's batched call
    tokenize_seconds: float = 0.0


class Scheduler:
    def __init__(
        self,
        scheduler_config: SchedulerConfig,
        request_processor: RequestProcessor,
        is_padded: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if scheduler_config.max_num_batched_tokens is None:
            raise ValueError(
                "max_num_batched_tokens is 'auto': schedule with the budget the model runner chose "
                "(SchedulerConfig.with_budget)"
            )
        self.config = scheduler_config
        self.request_processor = request_processor
        self.is_padded = is_padded
        self.max_num_batched_tokens: int = scheduler_config.max_num_batched_tokens
        self.max_num_seqs = scheduler_config.max_num_seqs
        self.queues: dict[int, deque[Request]] = {}  # by priority (lower first); FCFS within one
        self.max_num_low_priority_tokens = max(1, self.max_num_batched_tokens // LOW_PRIORITY_STEP_DIVISOR)
        self.clock = clock
        self.last_interactive_time = -math.inf  # clock time of the last interactive arrival
        # the hold-off (3. above): interactive requests scheduled and not yet finished, the last finish, and
        # since when lower-priority work has been held (None: it is not)
        self.num_interactive_running = 0
        self.last_interactive_finish = -math.inf
        self.low_priority_held_since: float | None = None
        # the hold for the clients the last step answered (their next requests join one batch)
        self.batch_forming = BatchForming(
            scheduler_config.max_batch_wait_seconds,
            self.max_num_seqs,
            self.max_num_batched_tokens,
            clock,
        )

    @property
    def num_waiting(self) -> int:
        return sum(len(queue) for queue in self.queues.values())

    def has_waiting(self) -> bool:
        return any(self.queues.values())

    def add_request(self, request: Request) -> None:
        self.queues.setdefault(request.priority, deque()).append(request)
        self.batch_forming.note_arrival(request.arrival_time)
        if request.priority == PRIORITY_INTERACTIVE:
            self.last_interactive_time = self.clock()

    def abort_request(self, request: Request) -> bool:
        """Drop a queued request; False when it already left the queue."""
        try:
            self.queues.get(request.priority, deque()).remove(request)
        except ValueError:
            return False
        request.status = RequestStatus.ABORTED
        return True

    def schedule(self) -> SchedulerOutput:
        output = SchedulerOutput()
        # 1. tokenize the front of the queues in one batched call (lazy: only what may run soon)
        window = self._window(self.config.max_num_lookahead)
        start = time.perf_counter()
        output.num_tokenized = self.request_processor.process(window)
        output.tokenize_seconds = time.perf_counter() - start
        # 2. admit by priority, FCFS within one, while the budget allows; answer failed tokenization
        budget = TokenBudget(self.max_num_batched_tokens, self.max_num_seqs, self.is_padded)
        low_priority = TokenBudget(self._low_priority_limit(), self.max_num_seqs, is_padded=False)
        for priority in sorted(self.queues):
            if output.scheduled_requests:
                break  # one priority a step
            is_interactive = priority == PRIORITY_INTERACTIVE
            if not is_interactive and self._low_priority_hold() > 0:
                break  # the next interactive request is likely a few ms away
            queue = self.queues[priority]
            if not self._admit(queue, budget, None if is_interactive else low_priority, output):
                break  # never skip ahead of the head of a queue, nor of a higher priority
        self._note_scheduled(output.scheduled_requests)
        self.batch_forming.note_step_start(len(output.scheduled_requests), budget.cost)
        return output

    def finish(self, requests: Iterable[Request]) -> None:
        """The engine got these scheduled requests' results (or failures) back: ends their hold-off."""
        requests = list(requests)
        self.batch_forming.note_step_end(len(requests), self.num_waiting)
        num_interactive = sum(1 for request in requests if request.priority == PRIORITY_INTERACTIVE)
        if num_interactive:
            self.num_interactive_running = max(0, self.num_interactive_running - num_interactive)
            self.last_interactive_finish = self.clock()

    def hold_seconds(self) -> float:
        """Seconds before a step should run (0: now): waiting work is all lower-priority and held off
        (3. above), or fewer requests wait than the clients the last step answered are about to send
        (``BatchForming``). The engine loop waits this long for new requests instead of stepping."""
        if not self.has_waiting():
            return 0.0
        forming = self.batch_forming.hold_seconds(self.num_waiting)
        if self.queues.get(PRIORITY_INTERACTIVE):
            return forming
        return max(forming, self._low_priority_hold())

    def _note_scheduled(self, scheduled: list[Request]) -> None:
        if not scheduled:
            return
        if scheduled[0].priority == PRIORITY_INTERACTIVE:
            self.num_interactive_running += len(scheduled)
        else:
            self.low_priority_held_since = None

    def _low_priority_hold(self) -> float:
        """Seconds lower-priority work is still held off (0: it may run now)."""
        now = self.clock()
        if self.num_interactive_running:
            remaining = INTERACTIVE_HOLD_SECONDS  # at least: it restarts when the interactive step finishes
        else:
            remaining = self.last_interactive_finish + INTERACTIVE_HOLD_SECONDS - now
        if remaining <= 0:
            return 0.0
        if self.low_priority_held_since is None:
            self.low_priority_held_since = now
        return max(0.0, min(remaining, self.low_priority_held_since + MAX_LOW_PRIORITY_HOLD_SECONDS - now))

    def _admit(
        self, queue: deque[Request], budget: TokenBudget, limit: TokenBudget | None, output: SchedulerOutput
    ) -> bool:
        """Admit from the head of ``queue``; True when it emptied (a lower priority may follow)."""
        now = time.monotonic()  # each admitted request's scheduled_time: a metric, beside arrival_time
        while queue:
            request = queue[0]
            if request.status == RequestStatus.FAILED:
                output.failed_requests.append(queue.popleft())
                continue
            if not request.ready:
                return False
            num_tokens = request.num_tokens
            if not budget.can_add(num_tokens) or (limit is not None and not limit.can_add(num_tokens)):
                return False
            budget.add(num_tokens)
            if limit is not None:
                limit.add(num_tokens)
            request.status = RequestStatus.RUNNING
            request.scheduled_time = now
            output.scheduled_requests.append(queue.popleft())
        return True

    def _low_priority_limit(self) -> int:
        """Tokens of lower-priority requests one step may carry: all of the budget, or a share of it while
        interactive requests keep arriving."""
        if self.clock() - self.last_interactive_time < INTERACTIVE_WINDOW_SECONDS:
            return self.max_num_low_priority_tokens
        return self.max_num_batched_tokens

    def _window(self, max_num_requests: int) -> list[Request]:
        """The first ``max_num_requests`` waiting requests in scheduling order (``islice`` walks each
        queue in C)."""
        window: list[Request] = []
        for priority in sorted(self.queues):
            window.extend(islice(self.queues[priority], max_num_requests - len(window)))
            if len(window) >= max_num_requests:
                break
        return window
