"""``TokenizationClock``: when each request was tokenized, for tracing.

The scheduler tokenizes a lookahead window in ONE batched call, so a request's tokenization is that call:
this wraps the scheduler's ``RequestProcessor`` and keeps, per request it tokenized, the (start, end) of the
call (monotonic seconds). It is installed only when a caller asks for the times (``AsyncLLMEngine.
observe_calls`` before ``start()``): an engine without it does no extra work. Written on the engine thread,
taken (and forgotten) by the caller once its call is answered.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from wde.entrypoints.call_record import TokenizeSpan
from wde.request import Request

# Times of requests nobody takes (aborted while queued) are dropped oldest first past this many.
MAX_ENTRIES = 100_000


class TokenizationClock:
    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._processor: Any = None  # the scheduler's RequestProcessor, once installed
        self._spans: dict[str, TokenizeSpan] = {}  # request id -> its tokenizer call
        self._lock = threading.Lock()  # the engine thread writes, callers' threads take

    def install(self, engine: Any) -> Any:
        """Wrap ``engine.scheduler``'s request processor (on the engine thread, as it is built); returns
        the engine."""
        scheduler = engine.scheduler
        self._processor = scheduler.request_processor
        scheduler.request_processor = self
        return engine

    def process(self, requests: Sequence[Request]) -> int:
        """The wrapped ``RequestProcessor.process``, timed."""
        untokenized = [request for request in requests if not request.is_tokenized]
        start = time.monotonic()
        num_tokenized = self._processor.process(requests)
        end = time.monotonic()
        if num_tokenized:
            with self._lock:
                for request in untokenized:
                    if request.is_tokenized:
                        self._spans[request.request_id] = (start, end)
                while len(self._spans) > self.max_entries:
                    del self._spans[next(iter(self._spans))]
        return num_tokenized

    def take(self, request_ids: Sequence[str]) -> list[TokenizeSpan | None]:
        """The tokenizer call of each request (None: not tokenized by text), forgotten from now on."""
        with self._lock:
            return [self._spans.pop(request_id, None) for request_id in request_ids]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._processor, name)  # anything else the scheduler asks of its processor
