"""``CallRecord``: one submission's outputs with the times the outputs themselves do not carry, for an
observer such as the server's tracing (``AsyncLLMEngine.observe_calls``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from wde.outputs import RequestOutput

# (start, end) of the batched tokenizer call that tokenized one input, monotonic seconds
TokenizeSpan = tuple[float, float]


@dataclass(frozen=True)
class CallRecord:
    outputs: Sequence[RequestOutput]  # in input order; each carries its RequestMetrics
    # per output: its tokenizer call, or None (token-id input, failed before, or no TokenizationClock)
    tokenized: Sequence[TokenizeSpan | None]
    answered_time: float  # monotonic: when the caller got the outputs back


CallObserver = Callable[[CallRecord], None]
