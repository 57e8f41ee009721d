"""``WdeServer``: the Ray Serve ingress deployment of ``wde serve --ray``. Each replica builds the whole
``wde serve`` FastAPI app where it runs (``__serve_build_asgi_app__`` calls the picklable builder), so
every route, error shape and metric is the app's own; Ray runs the app's lifespan (the engine starts, and
drains when the replica stops).

Added around the app, nothing inside it:
  - the lifespan waits until the app's own ``GET /health`` answers 200 (the engine is loaded), so Ray
    routes nothing to a replica that is still loading, and a model that fails to load fails the replica;
  - ``check_health`` (Ray's periodic replica health check) asks ``GET /health`` too: a dead or wedged
    engine gets the replica replaced;
  - every answer carries ``X-Wde-Replica`` (the Serve replica's id, as in Serve's logs), to see which
    replica answered;
  - with a route prefix other than ``/``, the prefix is cut from the path (the app sees ``/embed``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from ray import serve
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.ray_serve.options import torch_threads

logger = logging.getLogger("wde.server")

REPLICA_HEADER = "x-wde-replica"
READY_TIMEOUT = 900.0  # seconds a replica's engine may take to load before the replica fails
READY_POLL = 0.25
PROBE_CLIENT = ("replica-probe", 0)  # the client of this module's own GET /health (not access-logged)


class ReplicaNotReadyError(RuntimeError):
    """The replica's app did not become healthy: the engine failed to load, or took too long."""


class WdeServer:
    """The deployment's class (``serve.ingress`` wraps it): ``build_app()`` returns the FastAPI app."""

    def __init__(
        self, build_app: Callable[[], Any], cpus: float, route_prefix: str = "/", log_level: str = "info"
    ) -> None:
        # 1. the replica's logging (the access log) and torch threads matching its CPU reservation
        logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        logging.getLogger("wde").setLevel(log_level.upper())
        logging.getLogger("wde.access").addFilter(_skip_probes)
        import torch

        torch.set_num_threads(torch_threads(cpus))
        self._build_app = build_app
        self._route_prefix = route_prefix
        self._replica_id = serve.get_replica_context().replica_id.unique_id

    def __serve_build_asgi_app__(self) -> ASGIApp:
        app = self._build_app()
        app.router.lifespan_context = _ready_lifespan(app.router.lifespan_context)
        if self._route_prefix != "/":
            app.add_middleware(StripRoutePrefixMiddleware)
        app.add_middleware(ReplicaHeaderMiddleware, replica_id=self._replica_id)  # outermost
        self._app = app
        return app

    async def check_health(self) -> None:
        """Ray calls this every health_check_period_s; raising marks the replica unhealthy."""
        status, body = await asgi_get(self._app, "/health")
        if status != 200:
            raise RuntimeError(f"GET /health answered {status}: {body.decode(errors='replace')}")


def _skip_probes(record: logging.LogRecord) -> bool:
    """The access log without this module's own health probes."""
    return f"client={PROBE_CLIENT[0]}:" not in record.getMessage()


def _ready_lifespan(inner: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The app's lifespan, whose start-up also waits for ``GET /health`` to answer 200."""

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[Any]:
        async with inner(app) as state:
            try:
                await wait_until_healthy(app, READY_TIMEOUT)
            except ReplicaNotReadyError as e:  # Ray reports a generic lifespan failure: say why here
                logger.error("this replica cannot serve: %s", e)
                raise
            yield state

    return lifespan


async def wait_until_healthy(app: ASGIApp, timeout: float) -> None:
    """Poll the app's ``GET /health`` until 200; raise when it says the engine is dead (503 without
    Retry-After) or after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        status, body, headers = await asgi_request(app, "GET", "/health")
        if status == 200:
            return
        reason = _error_message(body)
        if status == 503 and "retry-after" not in headers:
            raise ReplicaNotReadyError(f"the engine failed to load: {reason}")
        if time.monotonic() > deadline:
            raise ReplicaNotReadyError(f"the engine was not ready after {timeout:g} s: {reason}")
        await asyncio.sleep(READY_POLL)


def _error_message(body: bytes) -> str:
    """The "error" of the app's TEI-shaped error body, else the body."""
    try:
        return str(json.loads(body)["error"])
    except (ValueError, KeyError, TypeError):
        return body.decode(errors="replace")


async def asgi_get(app: ASGIApp, path: str) -> tuple[int, bytes]:
    status, body, _ = await asgi_request(app, "GET", path)
    return status, body


async def asgi_request(app: ASGIApp, method: str, path: str) -> tuple[int, bytes, dict[str, str]]:
    """One request to ``app`` in this process (no socket): (status, body, lower-cased headers)."""
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"replica")],
        "client": PROBE_CLIENT,
        "server": ("127.0.0.1", 0),
    }
    answer: dict[str, Any] = {"status": 0, "body": b"", "headers": {}}
    sent_request = False

    async def receive() -> Message:
        nonlocal sent_request
        if not sent_request:
            sent_request = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()  # nothing more: a disconnect never comes
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
            answer["headers"] = {k.decode().lower(): v.decode() for k, v in message.get("headers", [])}
        elif message["type"] == "http.response.body":
            answer["body"] += message.get("body", b"")

    await app(scope, receive, send)
    return answer["status"], answer["body"], answer["headers"]


class ReplicaHeaderMiddleware:
    """Adds ``X-Wde-Replica: <Serve replica id>`` to every HTTP answer."""

    def __init__(self, app: ASGIApp, replica_id: str) -> None:
        self.app = app
        self.header = (REPLICA_HEADER.encode(), replica_id.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), self.header]}
            await send(message)

        await self.app(scope, receive, send_with_header)


class StripRoutePrefixMiddleware:
    """Serve passes ``/<prefix>/embed`` with ``root_path`` ``/<prefix>``: the app sees ``/embed`` (its
    middlewares match on the path: admission's exempt routes, the error shape of ``/v1/*``)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        root_path = scope.get("root_path", "")
        if scope["type"] in ("http", "websocket") and root_path and scope["path"].startswith(root_path):
            path = scope["path"][len(root_path) :] or "/"
            scope = {**scope, "path": path, "raw_path": path.encode(), "root_path": ""}
        await self.app(scope, receive, send)


def ingress_deployment() -> type:
    """``WdeServer`` wrapped by ``serve.ingress`` (the app is built in each replica)."""
    return serve.ingress()(WdeServer)
