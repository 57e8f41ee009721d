"""The access log: one line per HTTP request at INFO (``wde.access``) with method, path, status, duration,
client, and the inputs and tokens the handler processed; 4xx lines at WARNING and 5xx at ERROR, with the
error message the client got. ``RequestPipeline`` (outermost) writes it, so every answer is logged,
the middlewares' own 401 / 408 / 413 / 429 / 503 included; handlers report usage with ``record_usage``.
Readiness probes (``GET /health``, ``/ping``, ``/``) answered 200 or 503 are logged at DEBUG: polling them
is normal, and the states they report (loading, ready, a failed or wedged engine, shutting down) are each
logged once by the server itself, as TEI and vLLM do."""

from __future__ import annotations

import logging
from typing import Any

import orjson
from starlette.types import Scope

logger = logging.getLogger("wde.access")

CLIENT_CLOSED = 499  # the client left before an answer: no error message to log
MAX_ERROR_BODY_BYTES = 4096  # error bodies are small JSON; read no more to find the message
USAGE_KEY = "wde_usage"  # the scope["state"] key that ``record_usage`` fills
PROBE_PATHS = frozenset({"/health", "/ping", "/"})  # TEI's health routes (server/routes/info.py)
PROBE_STATUSES = frozenset({200, 503})  # ready / not ready: the answers a probe expects


def record_usage(scope_state: Any, num_inputs: int, num_tokens: int | None = None) -> None:
    """Called by route handlers (``record_usage(request.state, ...)``) for their access-log line."""
    setattr(scope_state, USAGE_KEY, (num_inputs, num_tokens))


def log_access(scope: Scope, status: int, seconds: float, error_body: bytes) -> None:
    level = _level(scope, status)
    if not logger.isEnabledFor(level):
        return
    client = scope.get("client")
    parts = [
        f"{scope['method']} {scope['path']} {status} {seconds * 1000:.1f} ms",
        f"client={client[0]}:{client[1]}" if client else "client=-",
    ]
    usage = scope.get("state", {}).get(USAGE_KEY)
    if usage is not None:
        num_inputs, num_tokens = usage
        parts.append(f"inputs={num_inputs}")
        if num_tokens is not None:
            parts.append(f"tokens={num_tokens}")
    if status >= 400 and status != CLIENT_CLOSED:
        parts.append(f"error={_error_message(error_body)!r}")
    logger.log(level, " ".join(parts))


def _level(scope: Scope, status: int) -> int:
    if status in PROBE_STATUSES and scope["path"] in PROBE_PATHS and scope["method"] in ("GET", "HEAD"):
        return logging.DEBUG
    return logging.ERROR if status >= 500 else logging.WARNING if status >= 400 else logging.INFO


def _error_message(body: bytes) -> str:
    """The message of our TEI, OpenAI or Cohere error shape; the raw text otherwise."""
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode("utf-8", errors="replace").strip()
    error = payload.get("error", payload.get("message")) if isinstance(payload, dict) else None
    if isinstance(error, dict):
        error = error.get("message")
    return str(error if error is not None else payload)
