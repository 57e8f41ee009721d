"""Optional API key: ``Authorization: Bearer <key>`` on every route but /health and /metrics."""

from __future__ import annotations

import hmac

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from server.errors import UnauthorizedError, error_response

PUBLIC_PATHS = frozenset({"/health", "/metrics"})  # probes and scrapers carry no key


class ApiKeyMiddleware:
    def __init__(self, app: ASGIApp, api_key: str | None) -> None:
        self.app = app
        self.api_key = api_key.encode() if api_key else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.api_key is None or scope["path"] in PUBLIC_PATHS:
            await self.app(scope, receive, send)
            return
        scheme, _, token = Headers(scope=scope).get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self.api_key):
            await self.app(scope, receive, send)
            return
        error = UnauthorizedError("missing or wrong API key; send the header 'Authorization: Bearer <key>'")
        await error_response(error, scope["path"])(scope, receive, send)
