"""``BatchForwarder``: in an API worker that does not run the Batch API, its ``/v1/files`` and
``/v1/batches`` requests go to the worker that does (``server/batches/batch_link.py``), and the owner's
answer comes back unchanged: status, headers and body, streamed (a batch's output file in chunks).

It is ``RequestPipeline``'s last step: the key was checked, the body read whole within --payload-limit and
the request admitted, so what is sent is the client's request as it arrived, less the hop-by-hop headers
(and ``Origin``: CORS is answered here, by this worker's pipeline). One Unix connection per request, never
kept alive: the owner closing an idle connection cannot race a forwarded POST, and a forward costs a
connect (microseconds) beside a Batch API call that reads or writes files.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import httpx
from starlette.routing import BaseRoute, Match
from starlette.types import Message, Receive, Scope, Send

from server.batches.batch_link import BATCH_OWNER
from server.error_answers import error_response
from server.errors import BatchOwnerUnavailableError

logger = logging.getLogger("wde.server")

PATHS = frozenset({"/v1/files", "/v1/batches"})
PREFIXES = ("/v1/files/", "/v1/batches/")
# not forwarded: hop-by-hop headers, the body's framing (the body is whole: httpx sets Content-Length), CORS
REQUEST_HEADERS_DROPPED = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"upgrade",
        b"expect",
        b"transfer-encoding",
        b"content-length",
        b"origin",
    }
)
# not returned: hop-by-hop headers, and those this worker's HTTP server writes itself (Date, Server)
RESPONSE_HEADERS_DROPPED = frozenset({b"connection", b"keep-alive", b"transfer-encoding", b"date", b"server"})
CONNECT_SECONDS = 5.0  # a Unix connect succeeds or fails at once; this bounds a full backlog


class BatchForwarder:
    def __init__(self, socket_path: str, retry_after_seconds: int, routes: Sequence[BaseRoute]) -> None:
        """``routes``: the Batch API's routes (``/v1/files``, ``/v1/batches``), for the metrics' route
        label."""
        self.socket_path = socket_path
        self.retry_after_seconds = retry_after_seconds
        self.routes = list(routes)
        self._client: httpx.AsyncClient | None = None  # made on the event loop, at the first forward

    @staticmethod
    def handles(path: str) -> bool:
        return path in PATHS or path.startswith(PREFIXES)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # 1. the route template for this worker's metrics (the router that would set it is not reached)
        self._set_route(scope)
        # 2. the client's request, its body already read (the pipeline replays it)
        body = await _body(receive)
        if body is None:
            return  # the client left
        target = scope.get("raw_path") or scope["path"].encode()
        if scope.get("query_string"):
            target += b"?" + scope["query_string"]
        headers = [
            (name, value) for name, value in scope["headers"] if name.lower() not in REQUEST_HEADERS_DROPPED
        ]
        url = httpx.URL(scheme="http", host="wde-batch-owner", raw_path=target)
        request = self.client.build_request(scope["method"], url, headers=headers, content=body)
        # 3. the owner's answer, streamed back as it comes
        try:
            response = await self.client.send(request, stream=True)
        except httpx.TransportError as e:
            error = BatchOwnerUnavailableError(
                f"the Batch API runs in API worker {BATCH_OWNER}, which did not answer "
                f"({str(e) or type(e).__name__}): it is restarting or shutting down; retry after "
                f"{self.retry_after_seconds} s"
            )
            await error_response(error, scope["path"], self.retry_after_seconds)(scope, receive, send)
            return
        try:
            headers = [
                (name.lower(), value)
                for name, value in response.headers.raw
                if name.lower() not in RESPONSE_HEADERS_DROPPED
            ]
            await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()
        logger.debug(
            "%s %s forwarded to API worker %d: %d",
            scope["method"],
            scope["path"],
            BATCH_OWNER,
            response.status_code,
        )

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            transport = httpx.AsyncHTTPTransport(
                uds=self.socket_path, limits=httpx.Limits(max_keepalive_connections=0)
            )
            timeout = httpx.Timeout(None, connect=CONNECT_SECONDS)  # as long as the owner's handler runs
            self._client = httpx.AsyncClient(transport=transport, timeout=timeout, trust_env=False)
        return self._client

    def _set_route(self, scope: Scope) -> None:
        partial = None
        for route in self.routes:
            match, _ = route.matches(scope)
            if match is Match.FULL:
                scope["route"] = route
                return
            if match is Match.PARTIAL and partial is None:
                partial = route
        if partial is not None:  # a method the route does not take: the owner answers 405
            scope["route"] = partial


async def _body(receive: Receive) -> bytes | None:
    """The request body (None: the client disconnected)."""
    chunks: list[bytes] = []
    while True:
        message: Message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)
