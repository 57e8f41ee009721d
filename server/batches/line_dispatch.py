"""``RouteDispatcher``: one batch line's body POSTed to the app's own route, in process, at batch priority.

The line goes through the app's router exactly as a live request's body does (FastAPI's validation of the
route's request model, the handler, its engine call, the error table's answer), without the HTTP layer's
middlewares: no admission slot, no access-log line or HTTP metrics per line, no API key (the batch was
created with one). Its engine requests carry ``PRIORITY_BATCH``: interactive requests go first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import FastAPI
from fastapi.middleware.asyncexitstack import AsyncExitStackMiddleware
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.types import ASGIApp, Message

from wde.request import PRIORITY_BATCH, priority


@dataclass(frozen=True)
class RouteAnswer:
    status_code: int
    body: Any  # the decoded JSON body


class RouteDispatcher:
    def __init__(self, app: FastAPI) -> None:
        self.app = app
        self._routes: ASGIApp | None = None

    @property
    def routes(self) -> ASGIApp:
        """The app's router inside what FastAPI puts around it (built on first use: the error handlers are
        installed after the service is made). Every exception type of the table gets its answer here,
        500s included: a line's failure is its answer, never the runner's."""
        if self._routes is None:
            handlers = dict(self.app.exception_handlers)  # install_error_handlers': the error table
            self._routes = ExceptionMiddleware(AsyncExitStackMiddleware(self.app.router), handlers=handlers)
        return self._routes

    async def post(self, path: str, body: dict[str, Any]) -> RouteAnswer:
        """The route's answer to ``body``; raising only when the route's error table did not answer."""
        # 1. the request: the body as a client would send it, the app's own error handlers
        payload = orjson.dumps(body)
        scope = self._scope(path, payload)
        sent = False

        async def receive() -> Message:
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": payload, "more_body": False}

        # 2. the route, at batch priority; the answer collected
        status_code = 500
        chunks: list[bytes] = []

        async def send(message: Message) -> None:
            nonlocal status_code
            if message["type"] == "http.response.start":
                status_code = message["status"]
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        with priority(PRIORITY_BATCH):
            await self.routes(scope, receive, send)
        return RouteAnswer(status_code, orjson.loads(b"".join(chunks) or b"null"))

    def _scope(self, path: str, payload: bytes) -> dict[str, Any]:
        return {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode("ascii"),
            "root_path": "",
            "query_string": b"",
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode("ascii")),
            ],
            "client": None,
            "server": None,
            "app": self.app,
            "state": {},
        }
