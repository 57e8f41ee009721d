"""The Serve proxy's own 429 / 503 answers in wde's error shape, with Retry-After.

Ray's proxy answers by itself, in plain text, when its queue is full (``BackPressureError``: 429 with
Retry-After, as ``backpressure_config`` says), when no replica can take a request (503, no Retry-After) and
when no application routes the path (404: while ours starts or stops). ``ProxyErrorShapeMiddleware``
rewrites those answers as the app's own errors, 429 or 503: ``{"error", "error_type"}``, or OpenAI's
``{"error": {...}}`` on ``/v1/*`` and ``/v2/*``, always with Retry-After. The app's answers are JSON and
pass untouched, as does Ray's ``/-/`` API.

Ray installs it in its proxies from ``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH`` (``PROXY_CALLBACK``),
read where each proxy starts: ``wde serve --ray`` sets it for the local cluster it starts; on a cluster
started with ``ray start``, export it on every node before ``ray start`` (docs/ray-serve.md).

Imports no wde engine, no torch and no Ray: the proxy is a small process.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.middleware import Middleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

PROXY_CALLBACK_ENV = "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"
PROXY_CALLBACK = "server.ray_serve.proxy_errors.proxy_middlewares"
DEFAULT_RETRY_AFTER = "1"
UNAVAILABLE = (
    503,
    "Unhealthy",
    "server_error",
    "unavailable",
    "no replica can take the request now (the application is starting, restarting or stopping); retry later",
)
# Ray's status -> (our status, TEI error_type, OpenAI type, OpenAI code, what to do), as
# server/error_answers.py's table. Ray answers 404 when no application routes the path: under --route-prefix /
# that only happens while the application is deployed or deleted (the app answers its own unknown paths), so
# it is a 503.
REWRITTEN: dict[int, tuple[int, str, str, str, str]] = {
    429: (
        429,
        "Overloaded",
        "rate_limit_error",
        "rate_limit_exceeded",
        "every replica is busy and the Serve proxy's queue is full (--max-queued-requests); retry later",
    ),
    503: UNAVAILABLE,
    404: (
        503,
        "Unhealthy",
        "server_error",
        "unavailable",
        "no Serve application routes this path now: it is starting or stopping (retry later), or the path "
        "is outside every --route-prefix (GET /-/routes lists them)",
    ),
}


def proxy_middlewares() -> list[Middleware]:
    """The callback Ray's proxy calls (``PROXY_CALLBACK``)."""
    return [Middleware(ProxyErrorShapeMiddleware)]


class ProxyErrorShapeMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith("/-/"):
            await self.app(scope, receive, send)
            return
        held: list[Message] = []  # the start of a plain-text 429 / 503, then its body

        async def rewriting_send(message: Message) -> None:
            if message["type"] == "http.response.start" and _is_proxy_error(message):
                held.append(message)
                return
            if not held:
                await send(message)
                return
            held.append(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                for reply in rewrite(held, scope["path"]):
                    await send(reply)

        await self.app(scope, receive, rewriting_send)


def _is_proxy_error(start: Message) -> bool:
    headers = dict(start.get("headers", []))
    content_type = bytes(headers.get(b"content-type", b"")).decode("latin-1")
    return start["status"] in REWRITTEN and not content_type.startswith("application/json")


def rewrite(held: list[Message], path: str) -> list[Message]:
    """The held plain-text answer as the app's JSON error (its text kept in the message)."""
    start = held[0]
    text = b"".join(m.get("body", b"") for m in held[1:] if m["type"] == "http.response.body")
    status, tei_type, openai_type, code, advice = REWRITTEN[start["status"]]
    message = f"{advice} ({text.decode(errors='replace').strip()})" if text.strip() else advice
    body: dict[str, Any]
    if "/v1/" in path or "/v2/" in path:
        body = {"error": {"message": message, "type": openai_type, "param": None, "code": code}}
    else:
        body = {"error": message, "error_type": tei_type}
    payload = json.dumps(body).encode()
    kept = [
        (k, v)
        for k, v in start.get("headers", [])
        if bytes(k).lower() not in (b"content-type", b"content-length", b"retry-after")
    ]
    retry_after = dict(start.get("headers", [])).get(b"retry-after", DEFAULT_RETRY_AFTER.encode())
    headers = [
        *kept,
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
        (b"retry-after", bytes(retry_after)),
    ]
    return [
        {"type": "http.response.start", "status": status, "headers": headers},
        {"type": "http.response.body", "body": payload, "more_body": False},
    ]
