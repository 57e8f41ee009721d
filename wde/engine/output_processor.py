"""Maps batch results back to requests: one output per request, nothing for aborted ones."""

from __future__ import annotations

import time
from typing import Any

from wde.engine.executor import BatchResult
from wde.outputs import (
    CombinedEmbeddingOutput,
    EmbeddingOutput,
    ErrorOutput,
    MultiVectorOutput,
    RequestMetrics,
    RequestOutput,
    ScoreOutput,
    SingleKindOutput,
    SparseEmbeddingOutput,
    SparseVector,
    TokenVectors,
)
from wde.request import Request, RequestStatus


def _error_of(request: Request) -> Exception:
    """A request the scheduler failed carries its error; never None there."""
    if request.error is None:
        return RuntimeError(f"request {request.request_id} failed without an error (an engine bug)")
    return request.error


def _metrics(request: Request, finished_time: float) -> RequestMetrics:
    return RequestMetrics(request.arrival_time, request.scheduled_time, finished_time, request.tokenize_span)


class OutputProcessor:
    def process(self, results: list[BatchResult], failed: list[Request]) -> list[RequestOutput]:
        now = time.monotonic()
        outputs: list[RequestOutput] = [
            ErrorOutput(r.request_id, _error_of(r), _metrics(r, now)) for r in failed
        ]
        for result in results:
            for row, request in enumerate(result.requests):
                if request.status == RequestStatus.ABORTED:
                    continue
                error = result.errors.get(row)
                if error is not None:  # this request failed alone (its batch was retried without it)
                    request.fail(error)
                    outputs.append(
                        ErrorOutput(request.request_id, error, _metrics(request, now), is_input_error=False)
                    )
                    continue
                request.status = RequestStatus.FINISHED
                outputs.append(self.make_output(request, result.outputs[row], _metrics(request, now)))
        return outputs

    def make_output(self, request: Request, output: Any, metrics: RequestMetrics) -> RequestOutput:
        raise NotImplementedError


class EmbeddingOutputProcessor(OutputProcessor):
    """A dense vector, a sparse one, token vectors, or several of them (the kinds the request asked for)."""

    def make_output(
        self, request: Request, output: Any, metrics: RequestMetrics
    ) -> SingleKindOutput | CombinedEmbeddingOutput:
        if isinstance(output, dict):  # several kinds: {kind: result}
            outputs = {kind: self.make_output(request, result, metrics) for kind, result in output.items()}
            return CombinedEmbeddingOutput(request.request_id, outputs, request.num_tokens, metrics)  # type: ignore[arg-type]
        if isinstance(output, SparseVector):
            return SparseEmbeddingOutput(
                request.request_id, output.indices, output.values, request.num_tokens, metrics
            )
        if isinstance(output, TokenVectors):
            return MultiVectorOutput(request.request_id, output.vectors, request.num_tokens, metrics)
        return EmbeddingOutput(request.request_id, output, request.num_tokens, metrics)


class ScoreOutputProcessor(OutputProcessor):
    def make_output(self, request: Request, output: Any, metrics: RequestMetrics) -> ScoreOutput:
        return ScoreOutput(request.request_id, output, request.num_tokens, metrics)
