"""Maps batch results back to requests: one output per request, nothing for aborted ones."""

from __future__ import annotations

from wde.engine.executor import BatchResult
from wde.engine.request import Request, RequestStatus
from wde.outputs import EmbeddingOutput, ErrorOutput, RequestOutput


class OutputProcessor:
    def process(self, results: list[BatchResult], failed: list[Request]) -> list[RequestOutput]:
        outputs: list[RequestOutput] = [ErrorOutput(r.request_id, r.error) for r in failed]
        for result in results:
            for row, request in enumerate(result.requests):
                if request.status == RequestStatus.ABORTED:
                    continue
                if result.error is not None:
                    request.fail(result.error)
                    outputs.append(ErrorOutput(request.request_id, result.error))
                    continue
                request.status = RequestStatus.FINISHED
                outputs.append(self.make_output(request, result.outputs[row]))
        return outputs

    def make_output(self, request: Request, output: object) -> RequestOutput:
        raise NotImplementedError


class EmbeddingOutputProcessor(OutputProcessor):
    def make_output(self, request: Request, output: object) -> EmbeddingOutput:
        return EmbeddingOutput(request.request_id, output, request.num_tokens)
