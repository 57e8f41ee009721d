"""Immediate admission, once the request's body is read: 429 (with Retry-After) when
--max-concurrent-requests requests are in flight. Nothing waits in a server-side queue for a slot."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from server.app_state import AppState
from server.errors import OverloadedError, error_response

# Cheap read-only routes stay answerable under load and while draining (health says 503 itself).
EXEMPT_PATHS = frozenset({"/health", "/metrics", "/info", "/v1/models", "/docs", "/redoc", "/openapi.json"})


class AdmissionMiddleware:
    def __init__(self, app: ASGIApp, state: AppState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in EXEMPT_PATHS:
            await self.app(scope, receive, send)
            return
        state, settings = self.state, self.state.settings
        if state.num_in_flight >= settings.max_concurrent_requests:
            error = OverloadedError(
                f"{settings.max_concurrent_requests} requests are in flight (--max-concurrent-requests); "
                f"retry after {settings.retry_after_seconds} s"
            )
            await error_response(error, scope["path"], settings.retry_after_seconds)(scope, receive, send)
            return
        state.num_in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            state.num_in_flight -= 1
