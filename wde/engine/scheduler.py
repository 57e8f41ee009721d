"""FCFS scheduler: tokenizes a lookahead window lazily, then admits requests while the budget allows."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from itertools import islice

from wde.config import SchedulerConfig
from wde.engine.request_processor import RequestProcessor
from wde.engine.token_budget import TokenBudget
from wde.request import Request, RequestStatus


@dataclass
class SchedulerOutput:
    scheduled_requests: list[Request] = field(default_factory=list)
    # Requests that failed before running (e.g. too long with truncation off): answered now.
    failed_requests: list[Request] = field(default_factory=list)
    num_batched_tokens: int = 0  # the budget's charge for this batch
    num_tokenized: int = 0  # requests tokenized by this step's batched call
    tokenize_seconds: float = 0.0


class Scheduler:
    def __init__(
        self, scheduler_config: SchedulerConfig, request_processor: RequestProcessor, is_padded: bool
    ) -> None:
        self.config = scheduler_config
        self.request_processor = request_processor
        self.is_padded = is_padded
        self.max_num_seqs = scheduler_config.max_num_seqs
        self.waiting: deque[Request] = deque()

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def has_waiting(self) -> bool:
        return bool(self.waiting)

    def add_request(self, request: Request) -> None:
        self.waiting.append(request)

    def abort_request(self, request: Request) -> bool:
        """Drop a queued request; False when it already left the queue."""
        try:
            self.waiting.remove(request)
        except ValueError:
            return False
        request.status = RequestStatus.ABORTED
        return True

    def schedule(self) -> SchedulerOutput:
        output = SchedulerOutput()
        # 1. tokenize the front of the queue in one batched call (lazy: only what may run soon)
        window = list(islice(self.waiting, self.config.max_num_lookahead))
        start = time.perf_counter()
        output.num_tokenized = self.request_processor.process(window)
        output.tokenize_seconds = time.perf_counter() - start
        # 2. admit FCFS while the budget allows; answer requests that failed tokenization
        budget = TokenBudget(self.config.max_num_batched_tokens, self.max_num_seqs, self.is_padded)
        while self.waiting:
            request = self.waiting[0]
            if request.status == RequestStatus.FAILED:
                output.failed_requests.append(self.waiting.popleft())
                continue
            if not request.is_tokenized or not budget.can_add(request.num_tokens):
                break  # FCFS: never skip ahead of the head of the queue
            budget.add(request.num_tokens)
            request.status = RequestStatus.RUNNING
            request.scheduled_time = time.monotonic()
            output.scheduled_requests.append(self.waiting.popleft())
        output.num_batched_tokens = budget.cost
        return output
