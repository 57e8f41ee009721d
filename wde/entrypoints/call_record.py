"""``CallRecord``: one submission's outputs and when the caller got them back, for an observer such as the
server's tracing (``AsyncLLMEngine.observe_calls``). The engine-side times (arrival, tokenizer call,
scheduling, finish) ride on each output's ``RequestMetrics``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from wde.outputs import RequestOutput


@dataclass(frozen=True)
class CallRecord:
    outputs: Sequence[RequestOutput]  # in input order; each carries its RequestMetrics
    answered_time: float  # monotonic: when the caller got the outputs back


CallObserver = Callable[[CallRecord], None]
