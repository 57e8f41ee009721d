"""The engine link's messages (server/engine_link/messages.py): every output kind, params and errors cross
unchanged; a prepared call's token ids cross as one array; the wire holds msgpack arrays of plain values
and raw bytes, no field names and nothing pickled."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from server.engine_link import messages
from server.engine_link.messages import Answer, Answers, Array, CallIn, Error, Prepared, Ranges, Submit
from wde.engine.errors import InputTooLongError
from wde.entrypoints.engine_thread import EngineDeadError
from wde.inputs import PoolingParams
from wde.outputs import (
    CombinedEmbeddingOutput,
    EmbeddingOutput,
    ErrorOutput,
    MultiVectorOutput,
    RequestMetrics,
    ScoreOutput,
    SparseEmbeddingOutput,
)

METRICS = RequestMetrics(1.0, 1.5, 2.0, (1.1, 1.2))


def round_trip(output):
    message = Answers([Answer(0, 7, [messages.output_of(output)])])
    decoded = messages.decode_to_worker(messages.encode(message))
    assert isinstance(decoded, Answers)
    (got,) = messages.request_outputs(decoded.answers[0].outputs, ["id-7"])
    return got


def test_every_output_kind_crosses_unchanged() -> None:
    rng = np.random.default_rng(0)
    dense = EmbeddingOutput("x", rng.standard_normal(384).astype(np.float32), 12, METRICS)
    sparse = SparseEmbeddingOutput(
        "x", np.array([3, 9], dtype=np.int64), np.array([0.5, 1.5], np.float32), 4, None, ["a", "b"]
    )
    multi = MultiVectorOutput("x", rng.standard_normal((5, 8)).astype(np.float32), 5, METRICS)
    score = ScoreOutput("x", np.array([0.25], np.float32), 9, METRICS)
    combined = CombinedEmbeddingOutput("x", {"dense": dense, "sparse": sparse}, 12, METRICS)
    for output in (dense, sparse, multi, score):
        got = round_trip(output)
        assert type(got) is type(output) and got.request_id == "id-7"
        assert got.num_tokens == output.num_tokens and got.metrics == output.metrics
    got_dense = round_trip(dense)
    assert np.array_equal(got_dense.embedding, dense.embedding)
    assert got_dense.embedding.dtype == np.float32 and got_dense.embedding.flags.writeable
    got_sparse = round_trip(sparse)
    assert got_sparse.indices.dtype == np.int64 and got_sparse.indices.tolist() == [3, 9]
    assert got_sparse.tokens == ["a", "b"] and got_sparse.values.tolist() == [0.5, 1.5]
    assert np.array_equal(round_trip(multi).vectors, multi.vectors)
    got_combined = round_trip(combined)
    assert set(got_combined.outputs) == {"dense", "sparse"}
    assert np.array_equal(got_combined.outputs["dense"].embedding, dense.embedding)


def test_errors_are_rebuilt_as_their_class_or_a_runtime_error() -> None:
    output = ErrorOutput("x", InputTooLongError("inputs[0] has 300 tokens"), METRICS, True)
    got = round_trip(output)
    assert isinstance(got.error, InputTooLongError) and str(got.error) == "inputs[0] has 300 tokens"
    assert got.is_input_error
    assert isinstance(Error.of(ValueError("bad")).rebuild(), ValueError)
    assert isinstance(Error.of(EngineDeadError("gone")).rebuild(), EngineDeadError)

    class Foreign(Exception):
        pass

    foreign = Error("somewhere.else", "Foreign", "text").rebuild()
    assert type(foreign) is RuntimeError and "Foreign: text" in str(foreign)
    assert type(Error.of(Foreign("t")).rebuild()) is RuntimeError


def submit(params: list[PoolingParams]) -> Submit:
    prepared = Prepared(["r0", "r1"], [3, 2], [True, False], [False, True], [0, 0], [True, True], (1.0, 1.5))
    call = CallIn(4, 0, len(params) - 1, 1, 2.5, prepared)
    ids, type_ids = np.array([101, 7, 102, 101, 102], np.int32), np.array([0, 0, 1], np.int32)
    return Submit("w0.1", params, [call], Array.of(ids), Array.of(type_ids))


def test_a_submit_crosses_with_its_params_and_one_array_of_ids() -> None:
    params = PoolingParams(normalize=False, dimensions=64, output=("dense", "sparse"), prompt_name="query")
    got = messages.decode_to_engine(messages.encode(submit([PoolingParams(), params])))
    assert isinstance(got, Submit) and got.worker == "w0.1"
    assert got.params == [PoolingParams(), params] and got.params[1].output == ("dense", "sparse")
    assert got.calls == submit([PoolingParams(), params]).calls
    assert got.token_ids.array().tolist() == [101, 7, 102, 101, 102]
    assert got.type_ids is not None and got.type_ids.array().dtype == np.int32


def test_ranges_cross_both_ways_keyed_by_equal_options() -> None:
    options = PoolingParams(normalize=True, truncate=True, output="dense", max_input_tokens=8)
    ranges = np.array([[-0.5, -0.25, 0.0], [0.5, 0.75, 1.0]], dtype=np.float32)
    data = messages.encode(Ranges.of("w1", 2, options, ranges))
    for decode in (messages.decode_to_engine, messages.decode_to_worker):
        got = decode(data)
        assert isinstance(got, Ranges) and (got.worker, got.model) == ("w1", 2)
        assert got.options == options and hash(got.options) == hash(options)  # a Calibration's key
        np.testing.assert_array_equal(got.ranges.array(), ranges)
        assert got.ranges.array().dtype == np.float32


def test_the_wire_is_plain_msgpack_arrays_without_field_names() -> None:
    data = messages.encode(submit([PoolingParams()]))
    raw = msgspec.msgpack.decode(data)  # readable without wde's types
    assert raw[0] == "Submit" and raw[1] == "w0.1"
    call = raw[3][0]
    assert call[:5] == [4, 0, 0, 1, 2.5] and call[5][0] == ["r0", "r1"]
    assert isinstance(raw[4][2], bytes) and np.frombuffer(raw[4][2], np.int32).tolist() == [
        101,
        7,
        102,
        101,
        102,
    ]
    assert b"request_ids" not in data and b"num_tokens" not in data


def test_no_python_object_is_sent() -> None:
    class Unknown:
        metrics = None

    with pytest.raises(TypeError, match="cannot send a Unknown"):
        messages.output_of(Unknown())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Encoding objects of type object is unsupported"):
        messages.encode(Answers([Answer(0, 0, None, Error("m", "n", object()))]))  # type: ignore[arg-type]
