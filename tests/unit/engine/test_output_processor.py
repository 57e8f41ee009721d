"""OutputProcessors: one output per request, errors of culprits as execution failures, scheduler failures
as input errors, nothing for aborted requests, each result kind mapped to its output class."""

from __future__ import annotations

import numpy as np

from tests.unit.engine.conftest import make_request
from wde.engine.errors import InputTooLongError, RequestFailedError
from wde.engine.executor import BatchResult
from wde.engine.output_processor import EmbeddingOutputProcessor, ScoreOutputProcessor
from wde.outputs import (
    CombinedEmbeddingOutput,
    EmbeddingOutput,
    ErrorOutput,
    MultiVectorOutput,
    ScoreOutput,
    SparseEmbeddingOutput,
    SparseVector,
    TokenVectors,
)
from wde.request import RequestStatus


def test_each_request_gets_one_output_and_aborted_ones_none() -> None:
    requests = [make_request(name, num_tokens=3) for name in ("ok", "culprit", "aborted")]
    requests[2].status = RequestStatus.ABORTED
    failed_early = make_request("too-long")
    failed_early.fail(InputTooLongError("too long"))
    result = BatchResult(
        requests, [np.ones(2, np.float32), None, np.ones(2, np.float32)], {1: RequestFailedError("x")}
    )
    outputs = EmbeddingOutputProcessor().process([result], [failed_early])
    by_id = {output.request_id: output for output in outputs}
    assert set(by_id) == {"ok", "culprit", "too-long"}
    assert isinstance(by_id["too-long"], ErrorOutput) and by_id["too-long"].is_input_error
    assert isinstance(by_id["culprit"], ErrorOutput) and not by_id["culprit"].is_input_error
    assert requests[1].status == RequestStatus.FAILED
    assert isinstance(by_id["ok"], EmbeddingOutput) and by_id["ok"].num_tokens == 3
    assert requests[0].status == RequestStatus.FINISHED
    assert by_id["ok"].metrics is not None


def test_every_embedding_kind_maps_to_its_output_class() -> None:
    request = make_request("r", num_tokens=5)
    processor = EmbeddingOutputProcessor()
    sparse = SparseVector(np.array([3, 9]), np.array([0.5, 0.25], np.float32))
    vectors = TokenVectors(np.ones((5, 4), np.float32))
    assert isinstance(processor.make_output(request, sparse, None), SparseEmbeddingOutput)  # type: ignore[arg-type]
    assert isinstance(processor.make_output(request, vectors, None), MultiVectorOutput)  # type: ignore[arg-type]
    combined = processor.make_output(request, {"dense": np.ones(4, np.float32), "sparse": sparse}, None)  # type: ignore[arg-type]
    assert isinstance(combined, CombinedEmbeddingOutput)
    assert isinstance(combined.outputs["dense"], EmbeddingOutput)
    assert isinstance(combined.outputs["sparse"], SparseEmbeddingOutput)


def test_scores() -> None:
    scores = np.array([0.75], np.float32)
    (output,) = ScoreOutputProcessor().process([BatchResult([make_request("r")], [scores])], [])
    assert isinstance(output, ScoreOutput) and output.scores is scores and output.num_tokens == 4
