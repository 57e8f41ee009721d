"""``RequestTrace``: what the engine did for one traced HTTP request, turned into child spans at its end.

``TracingMiddleware`` puts a ``RequestTrace`` in a context variable for the request; the engine's call
observer (``record_call``, set by ``create_app`` with tracing on) adds each submission's ``CallRecord`` to
it. When the answer has been sent, ``add_child_spans`` builds the spans from the recorded timestamps, with
explicit start and end times (nothing traces inside the engine):

- ``queue``: the first input's arrival in the engine to the last one's scheduling (tokenization included);
- ``tokenization``: one per batched tokenizer call that tokenized inputs of this request;
- ``inference``: one per forward pass that ran inputs of this request (scheduling to output);
- ``serialization``: the engine's last answer to the last byte of the response (post-processing such as
  ranking, JSON encoding, sending).
"""

from __future__ import annotations

from collections import defaultdict
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from wde.entrypoints.call_record import CallRecord
from wde.outputs import TokenizeSpan

CURRENT_TRACE: ContextVar[RequestTrace | None] = ContextVar("wde_request_trace", default=None)


@dataclass
class RequestTrace:
    offset_ns: int  # epoch ns - monotonic ns, sampled as the request began
    records: list[CallRecord] = field(default_factory=list)
    # False once the request is answered: a background task started by the request (and so inheriting its
    # context) must not pile its calls onto a finished trace
    is_open: bool = True

    def to_ns(self, monotonic_seconds: float) -> int:
        return round(monotonic_seconds * 1e9) + self.offset_ns


def record_call(record: CallRecord) -> None:
    """The engine's call observer: the record goes to the traced request it was submitted for."""
    trace = CURRENT_TRACE.get()
    if trace is not None and trace.is_open:
        trace.records.append(record)


def add_child_spans(tracer: Any, parent_context: Any, trace: RequestTrace, response_end: float) -> None:
    """The queue, tokenization, inference and serialization spans of ``trace`` under ``parent_context``;
    ``response_end`` is when the last byte was sent (monotonic seconds). Closes ``trace``."""
    trace.is_open = False
    if not trace.records:
        return  # no engine work: /info, /health, an answer before the handler ran
    # the outputs that went through the engine, with their metrics (a result cache's hits carry none)
    ran = [
        (output, output.metrics)
        for record in trace.records
        for output in record.outputs
        if output.metrics is not None
    ]
    # 1. queue: arrival to scheduling, over every input that reached the engine
    if ran:
        start = min(metrics.arrival_time for _, metrics in ran)
        end = max(metrics.scheduled_time or metrics.finished_time for _, metrics in ran)
        _span(tracer, parent_context, "queue", trace, start, end, {"wde.inputs": len(ran)})
    # 2. tokenization: each batched tokenizer call
    calls: dict[TokenizeSpan, int] = defaultdict(int)
    for _, metrics in ran:
        if metrics.tokenize_span is not None:
            calls[metrics.tokenize_span] += 1
    for (start, end), num_inputs in sorted(calls.items()):
        _span(tracer, parent_context, "tokenization", trace, start, end, {"wde.inputs": num_inputs})
    # 3. inference: each forward pass (its outputs share the time they were processed)
    passes: dict[float, list[tuple[Any, float]]] = defaultdict(list)  # finish -> (output, scheduled time)
    for output, metrics in ran:
        if metrics.scheduled_time is not None:
            passes[metrics.finished_time].append((output, metrics.scheduled_time))
    for finished, outputs in sorted(passes.items()):
        start = min(scheduled for _, scheduled in outputs)
        attributes = {
            "wde.inputs": len(outputs),
            "wde.tokens": sum(getattr(output, "num_tokens", 0) for output, _ in outputs),
        }
        _span(tracer, parent_context, "inference", trace, start, finished, attributes)
    # 4. serialization: from the engine's last answer to the response's last byte
    answered = max(record.answered_time for record in trace.records)
    _span(tracer, parent_context, "serialization", trace, answered, max(answered, response_end), {})


def _span(
    tracer: Any,
    parent_context: Any,
    name: str,
    trace: RequestTrace,
    start: float,
    end: float,
    attributes: dict[str, Any],
) -> None:
    span = tracer.start_span(
        name, context=parent_context, start_time=trace.to_ns(start), attributes=attributes
    )
    span.end(end_time=trace.to_ns(end))
