"""One request's life in the engine: queued -> tokenized -> scheduled -> finished (or failed/aborted)."""

from __future__ import annotations

import enum
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from wde.inputs import PoolingParams
from wde.outputs import TokenizeSpan
from wde.tokenizer import TokenIds

# Request priorities: a lower value is scheduled first, first come first served within one priority.
PRIORITY_INTERACTIVE = 0  # HTTP routes, LLM
PRIORITY_BATCH = 1  # the Batch API's lines: run when no interactive request waits

# The priority of what the current asyncio task (or thread) submits: read where a submission is made
# (``engine_thread.Call``), so that a caller can lower it around code it does not own (a route handler).
submission_priority: ContextVar[int] = ContextVar("wde_submission_priority", default=PRIORITY_INTERACTIVE)


@contextmanager
def priority(value: int) -> Iterator[None]:
    """Engine requests submitted inside this block (by this task or thread) get priority ``value``."""
    token = submission_priority.set(value)
    try:
        yield
    finally:
        submission_priority.reset(token)


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    ABORTED = "aborted"


@dataclass(eq=False)
class Request:
    request_id: str
    # Exactly one of text / text_pair / token_ids is set by the InputProcessor.
    text: str | None = None
    text_pair: tuple[str, str] | None = None
    token_ids: TokenIds | None = None
    token_type_ids: TokenIds | None = None
    params: PoolingParams = field(default_factory=PoolingParams)
    truncate: bool = True
    arrival_time: float = field(default_factory=time.monotonic)
    # the batched tokenizer call that tokenized its text (stamped by the RequestProcessor; None for token ids)
    tokenize_span: TokenizeSpan | None = None
    scheduled_time: float | None = None
    status: RequestStatus = RequestStatus.WAITING
    error: Exception | None = None
    truncated: bool = False  # cut to max_model_len
    # trailing tokens that attend but are not attended to (a ColBERT query's expansion with attend=False)
    num_unattended_tokens: int = 0
    priority: int = PRIORITY_INTERACTIVE
    # set by the RequestProcessor: its token ids are final (cut, side applied) or it failed; the scheduler
    # admits only ready requests. ``tokenizing``: handed to the tokenizer threads, results not yet back.
    ready: bool = False
    tokenizing: bool = False

    @property
    def is_tokenized(self) -> bool:
        return self.token_ids is not None

    @property
    def num_tokens(self) -> int:
        if self.token_ids is None:
            raise RuntimeError(f"request {self.request_id} is not tokenized yet")
        return len(self.token_ids)

    def fail(self, error: Exception) -> None:
        self.status = RequestStatus.FAILED
        self.error = error
