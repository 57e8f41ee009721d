"""The engine link's codec (server/engine_link/wire.py): every output kind, params and errors cross
unchanged, and nothing but msgpack's own types and raw array bytes is on the wire."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from server.engine_link import wire
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
    (decoded,) = wire.decode_outputs(wire.unpack(wire.pack(wire.encode_outputs([output]))), ["id-7"])
    return decoded


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
    assert np.array_equal(round_trip(dense).embedding, dense.embedding)
    assert round_trip(dense).embedding.dtype == np.float32 and round_trip(dense).embedding.flags.writeable
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
    assert isinstance(wire.decode_error(wire.encode_error(ValueError("bad"))), ValueError)
    assert isinstance(wire.decode_error(wire.encode_error(EngineDeadError("gone"))), EngineDeadError)

    class Foreign(Exception):
        pass

    foreign = wire.decode_error(["somewhere.else", "Foreign", "text"])
    assert type(foreign) is RuntimeError and "Foreign: text" in str(foreign)
    assert type(wire.decode_error(wire.encode_error(Foreign("t")))) is RuntimeError


def test_params_cross_with_their_tuple_of_outputs() -> None:
    params = PoolingParams(normalize=False, dimensions=64, output=("dense", "sparse"), prompt_name="query")
    assert wire.decode_params(wire.unpack(wire.pack(wire.encode_params(params)))) == params
    assert wire.decode_params(wire.encode_params(PoolingParams())) == PoolingParams()


def test_text_crosses_as_it_came_even_a_lone_surrogate() -> None:
    prompts = ["a\ud800", ("query", "document"), {"prompt_token_ids": [101, 102]}]
    got = wire.unpack(wire.pack(prompts))
    assert got[0] == "a\ud800" and got[1] == ["query", "document"] and got[2] == prompts[2]


def test_no_python_object_is_pickled() -> None:
    with pytest.raises(TypeError, match="cannot send a object"):
        wire.pack([object()])
    packed = wire.pack(wire.encode_outputs([EmbeddingOutput("x", np.ones(3, np.float32), 1)]))
    # plain msgpack with one extension type (the array): readable without wde's hooks
    ((tag, array, _, _),) = msgpack.unpackb(packed, raw=False)
    assert tag == "E" and isinstance(array, msgpack.ExtType) and array.code == wire.NDARRAY_EXT
