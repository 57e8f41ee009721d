"""Every message between the API workers and the engine process: msgspec ``Struct``s, each encoded as a
msgpack array tagged with its class name (no field names on the wire), decoded by one typed decoder per
direction; arrays cross as their raw bytes (``Array``), never as lists, and nothing is pickled.

    API worker ──PUSH──▶ PULL    ToEngine: Hello, Bye, Submit, Abort, HttpStats, Scrape, Ranges
    API worker ◀─DEALER── ROUTER ToWorker: Answers, States, Scraped, Ranges

A worker sends the calls an event-loop iteration made, for every model, in one ``Submit``: its requests
already validated and tokenized (``Prepared``: every request's token ids back to back in one int32 array),
the distinct ``PoolingParams`` once each. The engine process answers a step's finished calls to a worker in
one ``Answers``. Errors cross as their class's module and name plus the message, and are rebuilt only for
classes of ``wde``, ``server`` and builtins (anything else becomes a ``RuntimeError`` with the same text),
so the worker answers the status the single process would.
"""

from __future__ import annotations

import builtins
import importlib
from collections.abc import Sequence
from typing import Union

import msgspec
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

REBUILT_MODULES = ("wde.", "server.")  # error classes rebuilt by name (and builtins')


class Array(msgspec.Struct, array_like=True):
    """A numpy array as dtype, shape and its bytes (a ``bytearray`` once decoded: writable, no second
    copy)."""

    dtype: str
    shape: tuple[int, ...]
    data: bytearray

    @classmethod
    def of(cls, array: np.ndarray) -> Array:
        array = np.ascontiguousarray(array)
        return cls(array.dtype.str, array.shape, memoryview(array).cast("B"))  # type: ignore[arg-type]

    def array(self) -> np.ndarray:
        return np.frombuffer(self.data, dtype=np.dtype(self.dtype)).reshape(self.shape)


class Error(msgspec.Struct, array_like=True):
    module: str
    name: str
    message: str

    @classmethod
    def of(cls, error: BaseException) -> Error:
        return cls(type(error).__module__, type(error).__qualname__, str(error))

    def rebuild(self) -> Exception:
        cls: object = None
        if self.module == "builtins":
            cls = getattr(builtins, self.name, None)
        elif self.module.startswith(REBUILT_MODULES):
            try:
                cls = getattr(importlib.import_module(self.module), self.name, None)
            except ImportError:
                cls = None
        if isinstance(cls, type) and issubclass(cls, Exception):
            try:
                return cls(self.message)
            except Exception:  # a class whose constructor takes other arguments
                pass
        return RuntimeError(f"{self.name}: {self.message}")


# ---- worker -> engine ---------------------------------------------------------------------------------
class Prepared(msgspec.Struct, array_like=True):
    """A call's requests as the worker made them ready: validated, tokenized (prompt, truncation, pair
    template, a late-interaction side applied) and in the engine's order. Their token ids are a slice of
    the ``Submit``'s ``token_ids``; type ids (pairs) of its ``type_ids``."""

    request_ids: list[str]
    num_tokens: list[int]
    has_type_ids: list[bool]
    truncated: list[bool]
    num_unattended_tokens: list[int]  # a ColBERT query's expansion tokens that are not attended to
    tokenized: list[bool]  # tokenized by the worker (the others came as token ids)
    tokenize_span: tuple[float, float] | None  # the worker's tokenizer call (time.monotonic)


class CallIn(msgspec.Struct, array_like=True):
    call_id: int  # the worker's, unique per model
    model: int  # the model's index in the served list
    params: int  # an index into Submit.params
    priority: int
    arrival_time: float  # time.monotonic() (one clock for every process of the machine)
    requests: Prepared


class Submit(msgspec.Struct, tag=True, array_like=True):
    worker: str
    params: list[PoolingParams]
    calls: list[CallIn]
    token_ids: Array  # int32: every request's ids, call after call
    type_ids: Array | None  # int32: the ids of the requests with has_type_ids, back to back


class Abort(msgspec.Struct, tag=True, array_like=True):
    worker: str
    model: int
    call_id: int


class HttpStats(msgspec.Struct, tag=True, array_like=True):
    """A worker's HTTP answers since its last report (model, route, method, status, seconds), its result
    caches' counts ({model: {ReuseStats field: value}}) and its CPU time so far."""

    worker: str
    role: str  # wde_process_cpu_seconds's (api-N)
    cpu_seconds: float
    observations: list[tuple[str, str, str, str, float]]
    cache_stats: dict[str, dict[str, float]]


class Scrape(msgspec.Struct, tag=True, array_like=True):
    """GET /metrics: the engine process renders the one registry, after this worker's latest stats."""

    worker: str
    scrape_id: int
    stats: HttpStats


class Hello(msgspec.Struct, tag=True, array_like=True):
    worker: str


class Bye(msgspec.Struct, tag=True, array_like=True):
    worker: str


class Ranges(msgspec.Struct, tag=True, array_like=True):
    """A model's int8 / uint8 ranges for one option set (``Calibration``), both ways: computed by the engine
    process at load, or by a worker on a first request with other options; the engine process keeps them
    and tells every other worker, so that each set is embedded once per server, not once per process."""

    worker: str  # who computed them ("" for the engine process)
    model: int
    options: PoolingParams
    ranges: Array  # float32 [2, dim]

    @classmethod
    def of(cls, worker: str, model: int, options: PoolingParams, ranges: np.ndarray) -> Ranges:
        return cls(worker, model, options, Array.of(ranges))


ToEngine = Union[Submit, Abort, HttpStats, Scrape, Hello, Bye, Ranges]  # noqa: UP007 (msgspec reads the Union)


# ---- engine -> worker ---------------------------------------------------------------------------------
class Metrics(msgspec.Struct, array_like=True):
    arrival_time: float
    scheduled_time: float | None
    finished_time: float
    tokenize_span: tuple[float, float] | None


class Dense(msgspec.Struct, tag=True, array_like=True):
    embedding: Array
    num_tokens: int
    metrics: Metrics | None


class Scores(msgspec.Struct, tag=True, array_like=True):
    scores: Array
    num_tokens: int
    metrics: Metrics | None


class Sparse(msgspec.Struct, tag=True, array_like=True):
    indices: Array
    values: Array
    num_tokens: int
    metrics: Metrics | None
    tokens: list[str] | None


class MultiVector(msgspec.Struct, tag=True, array_like=True):
    vectors: Array
    num_tokens: int
    metrics: Metrics | None


class Combined(msgspec.Struct, tag=True, array_like=True):
    outputs: dict[str, Union[Dense, Sparse, MultiVector]]  # noqa: UP007
    num_tokens: int
    metrics: Metrics | None


class Failed(msgspec.Struct, tag=True, array_like=True):
    error: Error
    metrics: Metrics | None
    is_input_error: bool


Output = Union[Dense, Scores, Sparse, MultiVector, Combined, Failed]  # noqa: UP007


class Answer(msgspec.Struct, array_like=True):
    """A finished call: its outputs in order, or the error that failed it whole."""

    model: int
    call_id: int
    outputs: list[Output] | None
    error: Error | None = None


class Answers(msgspec.Struct, tag=True, array_like=True):
    answers: list[Answer]


class ModelState(msgspec.Struct, array_like=True):
    state: str  # an EngineState value
    reason: str  # why it takes no work ("" when ready)
    num_waiting: int
    num_unfinished: int
    forward_seconds: float  # how long the forward running now has run (the watchdog's reading)
    backend: str  # the attention backend ("" until ready)
    max_num_batched_tokens: int | None  # the token budget the runner chose (None until ready)
    budget_reason: str | None
    # False: unloaded by --max-loaded-models (its requests still go to the engine process, which queues
    # them and loads it on demand); how many engines were made for it
    loaded: bool = True
    num_loads: int = 1


class States(msgspec.Struct, tag=True, array_like=True):
    models: list[ModelState]


class Scraped(msgspec.Struct, tag=True, array_like=True):
    scrape_id: int
    text: bytes


ToWorker = Union[Answers, States, Scraped, Ranges]  # noqa: UP007


# ---- codecs --------------------------------------------------------------------------------------------
_encoder = msgspec.msgpack.Encoder()
_to_engine = msgspec.msgpack.Decoder(ToEngine)
_to_worker = msgspec.msgpack.Decoder(ToWorker)


def encode(message: msgspec.Struct) -> bytes:
    return _encoder.encode(message)


def decode_to_engine(data: bytes) -> ToEngine:
    return _to_engine.decode(data)


def decode_to_worker(data: bytes) -> ToWorker:
    return _to_worker.decode(data)


# ---- outputs ------------------------------------------------------------------------------------------
def _metrics_of(metrics: RequestMetrics | None) -> Metrics | None:
    if metrics is None:
        return None
    return Metrics(metrics.arrival_time, metrics.scheduled_time, metrics.finished_time, metrics.tokenize_span)


def _request_metrics(metrics: Metrics | None) -> RequestMetrics | None:
    if metrics is None:
        return None
    span = metrics.tokenize_span
    return RequestMetrics(metrics.arrival_time, metrics.scheduled_time, metrics.finished_time, span)


def output_of(output: RequestOutput) -> Output:
    """An engine output as it crosses (its request id stays behind: the worker knows its own)."""
    metrics = _metrics_of(output.metrics)
    if isinstance(output, EmbeddingOutput):
        return Dense(Array.of(output.embedding), output.num_tokens, metrics)
    if isinstance(output, ScoreOutput):
        return Scores(Array.of(output.scores), output.num_tokens, metrics)
    if isinstance(output, SparseEmbeddingOutput):
        indices, values = Array.of(output.indices), Array.of(output.values)
        return Sparse(indices, values, output.num_tokens, metrics, output.tokens)
    if isinstance(output, MultiVectorOutput):
        return MultiVector(Array.of(output.vectors), output.num_tokens, metrics)
    if isinstance(output, CombinedEmbeddingOutput):
        parts = {kind: output_of(part) for kind, part in output.outputs.items()}
        return Combined(parts, output.num_tokens, metrics)  # type: ignore[arg-type]
    if isinstance(output, ErrorOutput):
        return Failed(Error.of(output.error), metrics, output.is_input_error)
    raise TypeError(f"cannot send a {type(output).__name__} from the engine process")


def request_output(output: Output, request_id: str) -> RequestOutput:
    """The worker's ``RequestOutput`` of a crossed one."""
    metrics = _request_metrics(output.metrics)
    if isinstance(output, Dense):
        return EmbeddingOutput(request_id, output.embedding.array(), output.num_tokens, metrics)
    if isinstance(output, Scores):
        return ScoreOutput(request_id, output.scores.array(), output.num_tokens, metrics)
    if isinstance(output, Sparse):
        indices, values = output.indices.array(), output.values.array()
        return SparseEmbeddingOutput(request_id, indices, values, output.num_tokens, metrics, output.tokens)
    if isinstance(output, MultiVector):
        return MultiVectorOutput(request_id, output.vectors.array(), output.num_tokens, metrics)
    if isinstance(output, Combined):
        parts = {kind: request_output(part, request_id) for kind, part in output.outputs.items()}
        return CombinedEmbeddingOutput(request_id, parts, output.num_tokens, metrics)  # type: ignore[arg-type]
    return ErrorOutput(request_id, output.error.rebuild(), metrics, output.is_input_error)


def request_outputs(outputs: Sequence[Output], request_ids: Sequence[str]) -> list[RequestOutput]:
    pairs = zip(outputs, request_ids, strict=True)
    return [request_output(output, request_id) for output, request_id in pairs]
