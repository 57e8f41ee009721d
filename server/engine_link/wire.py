"""The bytes between the API workers and the engine process: msgpack, arrays as raw buffers.

No Python object is pickled: a call crosses as its prompts (str, token-id lists, text pairs: msgpack's own
types), its ``PoolingParams`` fields and its priority / arrival time; an output comes back as a tagged list
whose arrays are ``ndarray`` extensions (dtype, shape, the raw bytes). Errors cross as their class's
module and name plus the message, and are rebuilt only for classes of ``wde``, ``server`` and builtins
(anything else becomes a ``RuntimeError`` with the same text), so the worker answers the status the single
process would.

    payload = encode_outputs(outputs)        # engine process
    outputs = decode_outputs(payload, ids)   # API worker: the request ids of its own call
"""

from __future__ import annotations

import builtins
import dataclasses
import importlib
from collections.abc import Sequence
from typing import Any

import msgpack
import numpy as np

from wde.inputs import PoolingParams
from wde.outputs import (
    CombinedEmbeddingOutput,
    EmbeddingOutput,
    ErrorOutput,
    MultiVectorOutput,
    RequestMetrics,
    RequestOutput,
    ScoreOutput,
    SparseEmbeddingOutput,
)

NDARRAY_EXT = 1
REBUILT_MODULES = ("wde.", "server.")  # error classes rebuilt by name (and builtins')
_PARAM_FIELDS = tuple(field.name for field in dataclasses.fields(PoolingParams))


# ---- messages ---------------------------------------------------------------------------------------
# Text crosses as it came: a lone UTF-16 surrogate (JSON "\ud800") passes through, for the engine's
# InputProcessor to refuse with the same words as in a single process.
def pack(message: Any) -> bytes:
    return msgpack.packb(message, default=_encode_ext, use_bin_type=True, unicode_errors="surrogatepass")


def unpack(data: bytes) -> Any:
    return msgpack.unpackb(
        data, ext_hook=_decode_ext, raw=False, strict_map_key=False, unicode_errors="surrogatepass"
    )


def _encode_ext(value: Any) -> msgpack.ExtType:
    if isinstance(value, np.ndarray):
        array = np.ascontiguousarray(value)
        header = msgpack.packb([array.dtype.str, list(array.shape)])
        return msgpack.ExtType(NDARRAY_EXT, header + array.tobytes())
    if isinstance(value, np.generic):  # a numpy scalar: its Python value
        return value.item()
    raise TypeError(f"cannot send a {type(value).__name__} to the engine process")


def _decode_ext(code: int, data: bytes) -> Any:
    if code != NDARRAY_EXT:
        raise ValueError(f"unknown msgpack extension {code} from the engine link")
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(data)
    dtype, shape = unpacker.unpack()
    offset = unpacker.tell()
    # a writable copy: the outputs' users may normalize or cut in place
    return np.frombuffer(data, dtype=np.dtype(dtype), offset=offset).reshape(shape).copy()


# ---- the parts of a call ------------------------------------------------------------------------------
def encode_params(params: PoolingParams) -> list[Any]:
    return [getattr(params, name) for name in _PARAM_FIELDS]


def decode_params(values: Sequence[Any]) -> PoolingParams:
    fields = dict(zip(_PARAM_FIELDS, values, strict=True))
    if isinstance(fields.get("output"), list):  # msgpack turned the tuple of kinds into a list
        fields["output"] = tuple(fields["output"])
    return PoolingParams(**fields)


def encode_error(error: BaseException) -> list[str]:
    cls = type(error)
    return [cls.__module__, cls.__qualname__, str(error)]


def decode_error(values: Sequence[str]) -> Exception:
    module_name, class_name, message = values
    cls: Any = None
    if module_name == "builtins":
        cls = getattr(builtins, class_name, None)
    elif module_name.startswith(REBUILT_MODULES):
        try:
            cls = getattr(importlib.import_module(module_name), class_name, None)
        except ImportError:
            cls = None
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            return cls(message)
        except Exception:  # a class whose constructor takes other arguments
            pass
    return RuntimeError(f"{class_name}: {message}")


def _encode_metrics(metrics: RequestMetrics | None) -> list[Any] | None:
    if metrics is None:
        return None
    return [metrics.arrival_time, metrics.scheduled_time, metrics.finished_time, metrics.tokenize_span]


def _decode_metrics(values: Sequence[Any] | None) -> RequestMetrics | None:
    if values is None:
        return None
    arrival, scheduled, finished, span = values
    return RequestMetrics(arrival, scheduled, finished, None if span is None else tuple(span))


# ---- outputs -----------------------------------------------------------------------------------------
def encode_output(output: RequestOutput) -> list[Any]:
    """One output as a tagged list (its request id stays behind: the worker knows its own)."""
    metrics = _encode_metrics(output.metrics)
    if isinstance(output, EmbeddingOutput):
        return ["E", output.embedding, output.num_tokens, metrics]
    if isinstance(output, ScoreOutput):
        return ["R", output.scores, output.num_tokens, metrics]
    if isinstance(output, SparseEmbeddingOutput):
        return ["S", output.indices, output.values, output.num_tokens, metrics, output.tokens]
    if isinstance(output, MultiVectorOutput):
        return ["M", output.vectors, output.num_tokens, metrics]
    if isinstance(output, CombinedEmbeddingOutput):
        parts = {kind: encode_output(part) for kind, part in output.outputs.items()}
        return ["C", parts, output.num_tokens, metrics]
    if isinstance(output, ErrorOutput):
        return ["X", encode_error(output.error), metrics, output.is_input_error]
    raise TypeError(f"cannot send a {type(output).__name__} from the engine process")


def decode_output(values: Sequence[Any], request_id: str) -> RequestOutput:
    tag = values[0]
    if tag == "E":
        return EmbeddingOutput(request_id, values[1], values[2], _decode_metrics(values[3]))
    if tag == "R":
        return ScoreOutput(request_id, values[1], values[2], _decode_metrics(values[3]))
    if tag == "S":
        _, indices, weights, num_tokens, metrics, tokens = values
        return SparseEmbeddingOutput(
            request_id, indices, weights, num_tokens, _decode_metrics(metrics), tokens
        )
    if tag == "M":
        return MultiVectorOutput(request_id, values[1], values[2], _decode_metrics(values[3]))
    if tag == "C":
        parts = {kind: decode_output(part, request_id) for kind, part in values[1].items()}
        return CombinedEmbeddingOutput(request_id, parts, values[2], _decode_metrics(values[3]))  # type: ignore[arg-type]
    if tag == "X":
        return ErrorOutput(request_id, decode_error(values[1]), _decode_metrics(values[2]), values[3])
    raise ValueError(f"unknown output tag {tag!r} from the engine process")


def encode_outputs(outputs: Sequence[RequestOutput]) -> list[list[Any]]:
    return [encode_output(output) for output in outputs]


def decode_outputs(values: Sequence[Sequence[Any]], request_ids: Sequence[str]) -> list[RequestOutput]:
    return [decode_output(value, request_id) for value, request_id in zip(values, request_ids, strict=True)]
