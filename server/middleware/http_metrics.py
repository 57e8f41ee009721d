"""Counts and times every HTTP answer by route template and status (499: client gone before an answer)."""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.metrics import ServerMetrics

CLIENT_CLOSED = "499"  # nginx's convention for a client that disconnected before the answer
UNMATCHED = "unmatched"  # any path that is no route: one label value, however many paths are probed


class HttpMetricsMiddleware:
    def __init__(self, app: ASGIApp, metrics: ServerMetrics, known_paths: set[str]) -> None:
        self.app = app
        self.metrics = metrics
        self.known_paths = known_paths  # route templates, for answers given before routing (401, 413, 429)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = CLIENT_CLOSED

        async def send_and_record(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = str(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_and_record)
        except Exception:
            status = "500"
            raise
        finally:
            route = self._route_label(scope)
            self.metrics.observe_http(route, scope["method"], status, time.perf_counter() - start)

    def _route_label(self, scope: Scope) -> str:
        """The matched route's path template (routing stores the route in the scope), not the raw path."""
        route_path = getattr(scope.get("route"), "path", None)
        if isinstance(route_path, str):
            return route_path
        return scope["path"] if scope["path"] in self.known_paths else UNMATCHED
