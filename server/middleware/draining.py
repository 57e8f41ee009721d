"""503 (with Retry-After) for a request that arrives while the server drains, before its body is read.
A request whose headers arrived before the signal is still served (within --graceful-timeout)."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from server.app_state import AppState
from server.errors import ServerDrainingError, error_response
from server.middleware.admission import EXEMPT_PATHS


class DrainingMiddleware:
    def __init__(self, app: ASGIApp, state: AppState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in EXEMPT_PATHS or not self.state.draining:
            await self.app(scope, receive, send)
            return
        error = ServerDrainingError("the server is shutting down; retry on another replica")
        retry_after = self.state.settings.retry_after_seconds
        await error_response(error, scope["path"], retry_after)(scope, receive, send)
