"""Observes every HTTP answer, outermost: counts and times it by served model (the one the route reached,
``server/reached_model.py``), route template and status (499: client gone before an answer) and, with the
access log on, logs its line (``server/access_log.py``)."""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.access_log import MAX_ERROR_BODY_BYTES, log_access
from server.metrics import ServerMetrics
from server.reached_model import CURRENT_REACHED_MODEL, ReachedModel

CLIENT_CLOSED = 499  # nginx's convention for a client that disconnected before the answer
UNMATCHED = "unmatched"  # any path that is no route: one label value, however many paths are probed


class HttpMetricsMiddleware:
    def __init__(
        self, app: ASGIApp, metrics: ServerMetrics, known_paths: set[str], access_log: bool = True
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.known_paths = known_paths  # route templates, for answers given before routing (401, 413, 429)
        self.access_log = access_log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = CLIENT_CLOSED
        error_body = bytearray()  # the start of an error answer, for the log line's message
        reached_model = ReachedModel()
        model_token = CURRENT_REACHED_MODEL.set(reached_model)

        async def send_and_record(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body" and status >= 400 and self.access_log:
                error_body.extend(message.get("body", b"")[: MAX_ERROR_BODY_BYTES - len(error_body)])
            await send(message)

        try:
            await self.app(scope, receive, send_and_record)
        except Exception:
            status = 500
            raise
        finally:
            CURRENT_REACHED_MODEL.reset(model_token)
            seconds = time.perf_counter() - start
            route = self._route_label(scope)
            self.metrics.observe_http(reached_model.name, route, scope["method"], str(status), seconds)
            if self.access_log:
                log_access(scope, status, seconds, bytes(error_body))

    def _route_label(self, scope: Scope) -> str:
        """The matched route's path template (routing stores the route in the scope), not the raw path."""
        route_path = getattr(scope.get("route"), "path", None)
        if isinstance(route_path, str):
            return route_path
        return scope["path"] if scope["path"] in self.known_paths else UNMATCHED
