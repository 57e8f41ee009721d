"""``RequestPipeline``: every request check and observation of the server in one pure-ASGI middleware,
applied in this order (outermost first):

1. metrics and the access log: every answer counted and timed by served model (the one the route reached,
   ``server/served_models/reached_model.py``), route template and status (499: client gone before an answer),
   and logged (``server/observability/access_log.py``); [Starlette's ``CORSMiddleware`` here, with
   --cors-allow-origins: outside the key check, as a browser's preflight carries no key]
2. the drain cutoff: a request still running when --graceful-timeout ends is cancelled by uvicorn; it is
   answered 503 (with Retry-After) instead of uvicorn's plain-text 500, and counted;
3. the API key: ``Authorization: Bearer <key>`` on every route but /health and /metrics (401);
4. draining: 503 (with Retry-After) for a request that arrives while the server drains, before its body is
   read (one whose headers arrived before the signal is still served, within --graceful-timeout);
5. the body: read within --payload-limit (413, judged by Content-Length and by the bytes that arrive) and
   --body-read-timeout (408 and the connection closed); then the handler runs, cancelled if the client
   disconnects meanwhile, so its engine requests are aborted instead of computed for nobody;
6. admission, once the body is read (a slow body holds no slot): 429 (with Retry-After) when
   --max-concurrent-requests requests are in flight; nothing waits in a server-side queue;
7. HEAD on a GET route (/health, /info, /v1/models, /metrics): the GET answer's status and headers, no body
   (FastAPI routes declared with GET do not answer HEAD themselves);
8. unknown request fields: one ``IgnoredFields`` record per request (``server/ignored_fields.py``), listed in
   the answer's ``x-wde-ignored-fields`` header;
9. --api-workers N: in a worker that does not run the Batch API, its requests forwarded to the one that does
   (``server/batches/batch_link.py``); in that one, a request forwarded to it is neither admitted nor
   counted nor logged again (the worker the client reached did all three).

One middleware rather than one per step: each ASGI layer costs a coroutine and a ``send`` wrapper per
request on the event loop, and this server answers short requests where that is most of the cost (issue 26).
Pure ASGI rather than ``BaseHTTPMiddleware``, so cancellation reaches the handler and bodies are not copied.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.app_state import AppState
from server.direct_routes import DirectRoutes, replayed_body
from server.error_answers import error_response
from server.errors import (
    OverloadedError,
    PayloadTooLargeError,
    RequestTimeoutError,
    ServerDrainingError,
    UnauthorizedError,
)
from server.ignored_fields import HEADER, IgnoredFields, current_ignored_fields
from server.observability.access_log import MAX_ERROR_BODY_BYTES, log_access
from server.served_models.reached_model import CURRENT_REACHED_MODEL, ReachedModel

if TYPE_CHECKING:
    from server.batches.batch_link import BatchLink

CLIENT_CLOSED = 499  # nginx's convention for a client that disconnected before the answer
UNMATCHED = "unmatched"  # any path that is no route: one label value, however many paths are probed
PUBLIC_PATHS = frozenset({"/health", "/metrics"})  # probes and scrapers carry no key
# Cheap read-only routes stay answerable under load and while draining (health says 503 itself).
EXEMPT_PATHS = frozenset({"/health", "/metrics", "/info", "/v1/models", "/docs", "/redoc", "/openapi.json"})


class Exchange:
    """One request's answer as the pipeline sees it: ``send_observed`` records what the client gets (status,
    the start of an error body, whether an answer started); ``send_app`` is what the handler sends through
    (the ignored-fields header added, HEAD's body dropped, completion recorded)."""

    def __init__(self, send: Send, record: IgnoredFields, head: bool, keep_error_body: bool) -> None:
        self.downstream = send
        self.app_downstream: Send = self.send_observed  # CORS's send when CORS sits between
        self.record = record
        self.head = head
        self.keep_error_body = keep_error_body
        self.status = CLIENT_CLOSED
        self.error_body = bytearray()  # the start of an error answer, for the log line's message
        self.response_started = False
        self.response_complete = False
        self.forwarded = False  # by another API worker, which admitted, counted and logged it (step 9)
        # the admission slot's release (step 6), called once: before the answer's last body message goes
        # out, so that a client's next request never finds its own finished one still counted
        self.release: Callable[[], None] | None = None

    def release_slot(self) -> None:
        release, self.release = self.release, None
        if release is not None:
            release()

    async def send_observed(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self.status = message["status"]
            self.response_started = True
        elif kind == "http.response.body" and self.status >= 400 and self.keep_error_body:
            self.error_body.extend(message.get("body", b"")[: MAX_ERROR_BODY_BYTES - len(self.error_body)])
        await self.downstream(message)

    async def send_app(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            if self.record.names:
                MutableHeaders(scope=message).append(HEADER, self.record.header_value())
        elif kind == "http.response.body":
            if self.head:
                message = {**message, "body": b""}
            last = not message.get("more_body", False)
            if last:
                self.release_slot()
            await self.app_downstream(message)
            if last:
                self.response_complete = True
            return
        await self.app_downstream(message)


class RequestPipeline:
    def __init__(
        self,
        app: ASGIApp,
        state: AppState,
        known_paths: set[str],
        wrap_gate: Callable[[ASGIApp], ASGIApp] | None = None,
        direct_routes: DirectRoutes | None = None,
        batch_link: BatchLink | None = None,
    ) -> None:
        """``known_paths``: the route templates, for answers given before routing (401, 413, 429);
        ``wrap_gate``: a middleware between step 1 and the rest (CORS); ``direct_routes``: the hot JSON
        routes answered without the app's routing layers (``server/direct_routes.py``); ``batch_link``: an
        API worker's part in the one Batch API of --api-workers N (step 9)."""
        self.app = app
        self.direct_routes = direct_routes
        self.state = state
        self.settings = settings = state.settings
        self.metrics = state.metrics
        self.known_paths = known_paths
        self.access_log = settings.access_log
        self.api_key = settings.api_key.encode() if settings.api_key else None
        self.payload_limit = settings.payload_limit
        self.body_read_timeout = settings.body_read_timeout
        self.strict_fields = settings.strict_request_fields
        self.gate: ASGIApp | None = None if wrap_gate is None else wrap_gate(self._gate_behind)
        # step 9: the socket other workers forward to (the owner), or the forwarder to it (the others)
        self.batch_socket = batch_link.server if batch_link is not None and batch_link.is_owner else None
        self.batch_forwarder = None
        if batch_link is not None and not batch_link.is_owner:
            from server.batches.batch_forwarder import BatchForwarder  # httpx: only where it forwards
            from server.routes import batches, files

            self.batch_forwarder = BatchForwarder(
                batch_link.socket_path,
                settings.retry_after_seconds,
                routes=[*files.router.routes, *batches.router.routes],
            )

    # ---- 1. metrics and the access log ---------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        record = IgnoredFields(strict=self.strict_fields)
        exchange = Exchange(send, record, scope["method"] == "HEAD", self.access_log)
        if self.batch_socket is not None and scope.get("server") == self.batch_socket:
            exchange.forwarded = True
        reached_model = ReachedModel()
        model_token = CURRENT_REACHED_MODEL.set(reached_model)
        # A mutable record in the context: tasks the app starts copy the context, and share the record.
        fields_token = current_ignored_fields.set(record)
        try:
            if self.gate is None:
                await self._gate(scope, receive, exchange)
            else:
                scope["wde.exchange"] = exchange
                await self.gate(scope, receive, exchange.send_observed)
        except Exception:
            exchange.status = 500
            raise
        finally:
            current_ignored_fields.reset(fields_token)
            CURRENT_REACHED_MODEL.reset(model_token)
            if not exchange.forwarded:
                seconds = time.perf_counter() - start
                status = exchange.status
                route = self._route_label(scope)
                self.metrics.observe_http(reached_model.name, route, scope["method"], str(status), seconds)
                if self.access_log:
                    log_access(scope, status, seconds, bytes(exchange.error_body))

    def _route_label(self, scope: Scope) -> str:
        """The matched route's path template (routing stores the route in the scope), not the raw path."""
        route_path = getattr(scope.get("route"), "path", None)
        if isinstance(route_path, str):
            return route_path
        return scope["path"] if scope["path"] in self.known_paths else UNMATCHED

    async def _gate_behind(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Steps 2-8 behind the wrapping middleware, which hands its own ``send`` on."""
        exchange: Exchange = scope.pop("wde.exchange")
        exchange.app_downstream = send
        await self._gate(scope, receive, exchange)

    # ---- 2. the drain cutoff -------------------------------------------------------------------------
    async def _gate(self, scope: Scope, receive: Receive, exchange: Exchange) -> None:
        try:
            await self._checked(scope, receive, exchange)
        except asyncio.CancelledError:
            if not self.state.draining:
                raise
            task = asyncio.current_task()
            if task is not None and hasattr(task, "uncancel"):  # Python >= 3.11
                task.uncancel()
            self.state.num_cut_off += 1
            if exchange.response_started:
                return  # half an answer: uvicorn closes the connection
            error = ServerDrainingError(
                "the server shut down before this request finished (--graceful-timeout); retry it on "
                "another replica"
            )
            retry_after = self.settings.retry_after_seconds
            await error_response(error, scope["path"], retry_after, close=True)(
                scope, receive, exchange.app_downstream
            )

    # ---- 3. the API key, 4. draining, 5. the body ----------------------------------------------------
    async def _checked(self, scope: Scope, receive: Receive, exchange: Exchange) -> None:
        path = scope["path"]
        authorization, content_length = _request_headers(scope)
        if self.api_key is not None and path not in PUBLIC_PATHS:
            scheme, _, token = authorization.partition(" ")
            if not (scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self.api_key)):
                unauthorized = UnauthorizedError(
                    "missing or wrong API key; send the header 'Authorization: Bearer <key>'"
                )
                await error_response(unauthorized, path)(scope, receive, exchange.app_downstream)
                return
        if self.state.draining and path not in EXEMPT_PATHS:
            draining = ServerDrainingError("the server is shutting down; retry on another replica")
            retry_after = self.settings.retry_after_seconds
            await error_response(draining, path, retry_after)(scope, receive, exchange.app_downstream)
            return
        # the declared size: refuse before reading anything; then the actual size, in time
        if content_length > self.payload_limit:
            await self._too_large(scope, receive, exchange.app_downstream)
            return
        try:
            body = await self._read_body_in_time(receive)
        except PayloadTooLargeError:
            await self._too_large(scope, receive, exchange.app_downstream)
            return
        except RequestTimeoutError as error:
            await error_response(error, path, close=True)(scope, receive, exchange.app_downstream)
            return
        if body is None:
            return  # the client left before sending its body
        await self._run_until_disconnect(scope, receive, exchange, body)

    async def _read_body_in_time(self, receive: Receive) -> bytes | None:
        """``_read_body`` cancelled after --body-read-timeout: a timer, not a task per request."""
        task = asyncio.current_task()
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            if task is not None:
                task.cancel()

        timer = asyncio.get_running_loop().call_later(self.body_read_timeout, expire)
        try:
            return await self._read_body(receive)
        except asyncio.CancelledError:
            if not expired:
                raise  # cancelled from outside (shutdown)
            if task is not None and hasattr(task, "uncancel"):  # Python >= 3.11
                task.uncancel()
            raise RequestTimeoutError(
                f"the request body took longer than --body-read-timeout ({self.body_read_timeout:g} s) "
                "to arrive; send it faster or raise the flag"
            ) from None
        finally:
            timer.cancel()

    async def _read_body(self, receive: Receive) -> bytes | None:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.payload_limit:
                raise PayloadTooLargeError
            chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def _run_until_disconnect(
        self, scope: Scope, receive: Receive, exchange: Exchange, body: bytes
    ) -> None:
        """Plain asyncio rather than an anyio task group: this runs once per request, and a watcher task
        plus ``Task.cancel`` costs a fraction of a task group's scopes on the event loop thread."""
        handler = asyncio.current_task()
        disconnected = asyncio.Event()

        async def after_body() -> Message:
            await disconnected.wait()
            return {"type": "http.disconnect"}

        replay_body = replayed_body(body, after_body)

        async def watch_disconnect() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            disconnected.set()
            if not exchange.response_complete and handler is not None:
                handler.cancel()

        watcher = asyncio.get_running_loop().create_task(watch_disconnect())
        try:
            await self._admitted(scope, replay_body, exchange)
        except asyncio.CancelledError:
            if not disconnected.is_set() or exchange.response_complete:
                raise  # cancelled from outside (shutdown): not ours to swallow
            if handler is not None and hasattr(handler, "uncancel"):  # Python >= 3.11
                handler.uncancel()
        finally:
            watcher.cancel()

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        error = PayloadTooLargeError(
            f"the request body is larger than --payload-limit ({self.payload_limit} bytes); "
            "split the inputs over several requests"
        )
        await error_response(error, scope["path"], close=True)(scope, receive, send)

    # ---- 6. admission, 7. HEAD as GET, 8. ignored fields, 9. the Batch API's worker: the app ---------
    async def _admitted(self, scope: Scope, receive: Receive, exchange: Exchange) -> None:
        path = scope["path"]
        if path in EXEMPT_PATHS or exchange.forwarded:
            await self._app(scope, receive, exchange)
            return
        state, settings = self.state, self.settings
        if not state.try_admit():
            error = OverloadedError(
                f"{settings.max_concurrent_requests} requests are in flight (--max-concurrent-requests); "
                f"retry after {settings.retry_after_seconds} s"
            )
            await error_response(error, path, settings.retry_after_seconds)(scope, receive, exchange.send_app)
            return
        exchange.release = state.release
        try:
            await self._app(scope, receive, exchange)
        finally:
            exchange.release_slot()

    async def _app(self, scope: Scope, receive: Receive, exchange: Exchange) -> None:
        if exchange.head:
            # A copy: the HTTP server keeps seeing HEAD in its own scope (and sends no body either).
            scope = {**scope, "method": "GET"}
        elif self.direct_routes is not None and (found := self.direct_routes.find(scope)) is not None:
            await self.direct_routes.serve(found, scope, receive, exchange.send_app, self.app)
            return
        if self.batch_forwarder is not None and self.batch_forwarder.handles(scope["path"]):
            await self.batch_forwarder(scope, receive, exchange.send_app)
            return
        await self.app(scope, receive, exchange.send_app)


def _request_headers(scope: Scope) -> tuple[str, int]:
    """(the Authorization header, Content-Length: 0 when absent or malformed, as the HTTP server rejects
    malformed lengths itself) from the raw headers, without building a headers object."""
    authorization, content_length = "", None
    for name, value in scope["headers"]:
        if len(name) == 13 and name.lower() == b"authorization":
            if not authorization:  # the first one, as Headers.get answers
                authorization = value.decode("latin-1")
        elif len(name) == 14 and content_length is None and name.lower() == b"content-length":
            try:
                content_length = int(value)
            except ValueError:
                content_length = 0
    return authorization, content_length or 0
