"""``TracingMiddleware`` (added only with tracing on): one SERVER span per HTTP request, continuing the
caller's trace from its W3C ``traceparent`` / ``tracestate`` headers (the propagators of
``OTEL_PROPAGATORS``; W3C trace context by default), with the engine's child spans added when the answer
has been sent (``server/observability/request_trace.py``). Outermost: the span covers every answer, 401 and
429 included. ``/health`` and ``/metrics`` are not traced.
"""

from __future__ import annotations

import time

from opentelemetry import context, propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.observability.request_trace import CURRENT_TRACE, RequestTrace, add_child_spans
from server.observability.tracing import Tracing

CLIENT_CLOSED = 499  # no answer was sent (the client went away), as RequestPipeline counts it
# Probes and scrapes, every few seconds from every supervisor: not traced (their counts are in /metrics)
UNTRACED_PATHS = frozenset({"/health", "/metrics"})


class TracingMiddleware:
    def __init__(self, app: ASGIApp, tracing: Tracing) -> None:
        self.app = app
        self.tracer = tracing.tracer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in UNTRACED_PATHS:
            await self.app(scope, receive, send)
            return
        # 1. the request span, a child of the caller's span when its headers carry one
        headers = {key.decode("latin-1").lower(): value.decode("latin-1") for key, value in scope["headers"]}
        method, path = scope["method"], scope["path"]
        span = self.tracer.start_span(
            f"{method} {path}",
            context=propagate.extract(headers),
            kind=SpanKind.SERVER,
            attributes={"http.request.method": method, "url.path": path, "url.scheme": scope["scheme"]},
        )
        span_context = trace.set_span_in_context(span)
        request_trace = RequestTrace(time.time_ns() - time.monotonic_ns())
        trace_token = CURRENT_TRACE.set(request_trace)
        context_token = context.attach(span_context)
        status = CLIENT_CLOSED

        async def send_and_record(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        # 2. the app; then the engine's child spans, and the request span ends with the last byte
        try:
            await self.app(scope, receive, send_and_record)
        except Exception as error:
            status = 500
            span.record_exception(error)
            raise
        finally:
            context.detach(context_token)
            CURRENT_TRACE.reset(trace_token)
            add_child_spans(self.tracer, span_context, request_trace, time.monotonic())
            route = getattr(scope.get("route"), "path", None)
            if isinstance(route, str):
                span.update_name(f"{method} {route}")
                span.set_attribute("http.route", route)
            span.set_attribute("http.response.status_code", status)
            if status >= 500:
                span.set_status(Status(StatusCode.ERROR))
            span.end()
