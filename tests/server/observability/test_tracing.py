"""OpenTelemetry tracing (server/observability/tracing.py, server/middleware/tracing.py,
server/observability/request_trace.py): the span tree of one request through a real engine, read back from
the SDK's in-memory exporter; off means off."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from server.app import create_app
from server.middleware.tracing import TracingMiddleware
from server.observability.request_trace import CURRENT_TRACE, RequestTrace, add_child_spans, record_call
from server.observability.tracing import Tracing, exporter_names, tracing_requested
from server.settings import ServerSettings
from tests.server.conftest import TEXTS
from wde import EngineArgs
from wde.entrypoints.async_llm_engine import AsyncLLMEngine
from wde.entrypoints.call_record import CallRecord

pytestmark = pytest.mark.anyio

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CALLER_SPAN_ID}-01"
CHILDREN = ("queue", "tokenization", "inference", "serialization")


@pytest.fixture(scope="module")
def traced() -> Iterator[tuple[object, InMemorySpanExporter, AsyncLLMEngine]]:
    """An app with tracing into memory, created (as ``wde serve`` does) before its engine starts."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    engine = AsyncLLMEngine(EngineArgs())
    app = create_app(engine, ServerSettings(), tracing=Tracing(provider))
    engine.start()
    engine.wait_until_ready(timeout=120)
    yield app, exporter, engine
    engine.shutdown(timeout=60)
    provider.shutdown()


async def post(app: object, path: str, body: dict, headers: dict[str, str] | None = None) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://wde.test", timeout=60) as client:
        return await client.post(path, json=body, headers=headers or {})


def by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, list[ReadableSpan]]:
    found: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        found.setdefault(span.name, []).append(span)
    return found


async def test_one_request_is_a_span_tree_in_the_callers_trace(traced) -> None:
    app, exporter, _ = traced
    exporter.clear()
    response = await post(app, "/embed", {"inputs": TEXTS}, {"traceparent": TRACEPARENT})
    assert response.status_code == 200
    spans = by_name(exporter.get_finished_spans())
    # 1. the request span continues the caller's trace, under the caller's span
    (request,) = spans["POST /embed"]
    assert request.kind == SpanKind.SERVER
    assert format(request.context.trace_id, "032x") == TRACE_ID
    assert format(request.parent.span_id, "016x") == CALLER_SPAN_ID and request.parent.is_remote
    assert request.attributes["http.route"] == "/embed"
    assert request.attributes["http.response.status_code"] == 200
    # 2. its children: one of each here (4 short texts: one tokenizer call, one forward pass)
    assert sorted(name for name in spans if name != "POST /embed") == sorted(CHILDREN)
    for name in CHILDREN:
        (child,) = spans[name]
        assert child.parent.span_id == request.context.span_id
        assert child.context.trace_id == request.context.trace_id
        assert request.start_time <= child.start_time <= child.end_time <= request.end_time, name
    assert spans["inference"][0].attributes["wde.inputs"] == len(TEXTS)
    assert spans["tokenization"][0].attributes["wde.inputs"] == len(TEXTS)
    # 3. in the order the engine did them: queued (tokenized meanwhile), run, then answered
    queue, tokenization = spans["queue"][0], spans["tokenization"][0]
    inference, serialization = spans["inference"][0], spans["serialization"][0]
    assert queue.start_time <= tokenization.start_time <= tokenization.end_time <= inference.start_time
    assert queue.end_time <= inference.end_time <= serialization.start_time


async def test_every_forward_pass_is_an_inference_span_and_token_ids_are_not_tokenized(traced) -> None:
    app, exporter, engine = traced
    token_ids = engine.info.tokenizer.encode("hello world").ids
    exporter.clear()
    response = await post(app, "/embed", {"inputs": [token_ids, token_ids]})
    assert response.status_code == 200
    spans = by_name(exporter.get_finished_spans())
    (request,) = spans["POST /embed"]
    assert request.parent is None  # no traceparent: a new trace
    assert "tokenization" not in spans and len(spans["inference"]) == 1
    # inputs over several forward passes (16 full-length texts, 2048-token budget): one span per pass
    exporter.clear()
    response = await post(app, "/v1/embeddings", {"input": ["word " * 300] * 16})
    assert response.status_code == 200
    passes = by_name(exporter.get_finished_spans())["inference"]
    assert len(passes) >= 2 and sum(span.attributes["wde.inputs"] for span in passes) == 16


async def test_answers_without_engine_work_have_only_the_request_span(traced) -> None:
    app, exporter, _ = traced
    exporter.clear()
    response = await post(app, "/embed", {"inputs": []}, {"traceparent": TRACEPARENT})
    assert response.status_code == 400  # TEI's "Empty"
    (request,) = exporter.get_finished_spans()
    assert request.name == "POST /embed" and request.attributes["http.response.status_code"] == 400
    # probes and scrapes are not traced
    exporter.clear()
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://wde.test") as client:
        assert (await client.get("/health")).status_code == 200
        assert (await client.get("/metrics")).status_code == 200
        assert (await client.get("/info")).status_code == 200
    assert [span.name for span in exporter.get_finished_spans()] == ["GET /info"]


async def test_off_by_default_no_middleware_no_observer(
    async_engine: AsyncLLMEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    app = create_app(async_engine, ServerSettings())
    try:
        assert app.state.tracing is None
        assert all(middleware.cls is not TracingMiddleware for middleware in app.user_middleware)
        assert async_engine._call_observer is None
        response = await post(app, "/embed", {"inputs": TEXTS[:1]}, {"traceparent": TRACEPARENT})
        assert response.status_code == 200 and "traceparent" not in response.headers
    finally:
        app.state.wde.detach()


async def test_tokenization_spans_ride_on_the_outputs_of_an_engine_observed_after_start(
    async_engine: AsyncLLMEngine,
) -> None:
    """The request carries its tokenizer call (no proxy around the scheduler): an observer installed on a
    running engine sees it, and token-id inputs have none."""
    records: list[CallRecord] = []
    async_engine.observe_calls(records.append)
    try:
        token_ids = async_engine.info.tokenizer.encode("hello world").ids
        await async_engine.encode([*TEXTS[:2], {"prompt_token_ids": token_ids}])
    finally:
        async_engine.observe_calls(None)
    (record,) = records
    text_spans = [output.metrics.tokenize_span for output in record.outputs[:2]]
    assert text_spans[0] is not None and text_spans[0] == text_spans[1]  # one batched call for both
    start, end = text_spans[0]
    assert record.outputs[0].metrics.arrival_time <= start <= end <= record.outputs[0].metrics.scheduled_time
    assert record.outputs[2].metrics.tokenize_span is None


def test_an_answered_request_takes_no_more_engine_calls() -> None:
    """A background task a request started inherits its context: its later calls stay out of the trace."""
    request_trace = RequestTrace(time.time_ns() - time.monotonic_ns())
    token = CURRENT_TRACE.set(request_trace)
    try:
        record = CallRecord([], time.monotonic())
        record_call(record)
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        add_child_spans(provider.get_tracer("test"), None, request_trace, time.monotonic())
        record_call(record)
    finally:
        CURRENT_TRACE.reset(token)
    assert request_trace.records == [record]
    assert [span.name for span in exporter.get_finished_spans()] == ["serialization"]


def test_the_environment_decides_when_the_flag_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not tracing_requested(None, {})
    assert tracing_requested(None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"})
    assert tracing_requested(None, {"OTEL_TRACES_EXPORTER": "console"})
    assert not tracing_requested(None, {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "x"})
    assert not tracing_requested(None, {"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "console"})
    assert tracing_requested(True, {}) and not tracing_requested(False, {"OTEL_TRACES_EXPORTER": "console"})
    assert Tracing.from_settings(False, {"OTEL_TRACES_EXPORTER": "console"}) is None
    # configured from OTEL_*: the exporters it names, the service name it gives (else "wde")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "embedder")
    tracing = Tracing.from_settings(None, {"OTEL_TRACES_EXPORTER": "console"})
    try:
        processor = tracing.provider._active_span_processor._span_processors[0]
        assert isinstance(processor.span_exporter, ConsoleSpanExporter)
        assert tracing.provider.resource.attributes["service.name"] == "embedder"
    finally:
        tracing.shutdown()


def test_otlp_follows_the_protocol_variables() -> None:
    assert exporter_names({}) == ["otlp_proto_grpc"]
    assert exporter_names({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}) == ["otlp_proto_http"]
    both = {"OTEL_TRACES_EXPORTER": "otlp,console", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}
    assert exporter_names(both) == ["otlp_proto_http", "console"]
    with pytest.raises(ValueError, match="http/json"):
        exporter_names({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})
    with pytest.raises(ValueError, match="zipkin"):
        Tracing.from_settings(True, {"OTEL_TRACES_EXPORTER": "zipkin"})
