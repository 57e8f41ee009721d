"""The one table from exceptions to HTTP answers, and the two error body shapes.

TEI routes answer ``{"error": "...", "error_type": "..."}``; ``/v1/*`` routes answer OpenAI's
``{"error": {"message", "type", "param", "code"}}``; Cohere's embed routes Cohere's ``{"id", "message"}``.
Route handlers raise; the handlers registered in ``install_error_handlers`` (and the middlewares, through
``error_response``) render. A route's door (``server/doors.py``) picks the shape and, where TEI's statuses
differ from OpenAI's convention (an over-long input: 413, not 400; a route the model does not serve: 424; an
empty list of inputs: 400) or Cohere's do (an invalid body: 400, not 422), the status: ``ERROR_TABLE`` holds
every door's answer, ``TEI_ERROR_TABLE`` and ``COHERE_ERROR_TABLE`` TEI's and Cohere's where they differ.

A 500 says what failed without internals ("inputs[2]: the forward pass failed for this input") and a
request id (also the ``X-Request-Id`` header); the exception itself goes to the log, once, under that id.
"""

from __future__ import annotations

import contextlib
import logging
import re
import secrets
import uuid
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException

from server.doors import TEI_OPENAI_PATHS, Door, door_of
from server.errors import (
    BatchDirInUseError,
    BatchDirUnwritableError,
    BatchOwnerUnavailableError,
    HeadersTooLargeError,
    ModelNotFoundError,
    OverloadedError,
    PayloadTooLargeError,
    RequestTimeoutError,
    ServerDrainingError,
    TooManyInputsError,
    UnauthorizedError,
    UnpairedFieldsError,
)
from server.responses import ORJSONResponse
from wde.engine.errors import InputTooLongError, RequestFailedError
from wde.entrypoints.async_llm_engine import TaskNotSupportedError
from wde.entrypoints.engine_thread import EngineDeadError, EngineUnavailableError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ErrorKind:
    status: int
    tei_type: str  # TEI's error_type
    openai_type: str  # OpenAI's error.type
    openai_code: str | None = None
    retry_after: bool = True  # 429 / 503: send Retry-After (not when retrying here cannot help)


VALIDATION = ErrorKind(422, "Validation", "invalid_request_error")
SERVER_ERROR = ErrorKind(500, "Backend", "server_error")

ERROR_TABLE: dict[type[Exception], ErrorKind] = {
    RequestValidationError: VALIDATION,
    InputTooLongError: ErrorKind(400, "Validation", "invalid_request_error", "context_length_exceeded"),
    TaskNotSupportedError: ErrorKind(400, "Validation", "invalid_request_error", "unsupported_task"),
    UnpairedFieldsError: ErrorKind(400, "Validation", "invalid_request_error", "unpaired_fields"),
    ValueError: VALIDATION,
    TypeError: VALIDATION,
    UnauthorizedError: ErrorKind(401, "Unauthorized", "invalid_request_error", "invalid_api_key"),
    ModelNotFoundError: ErrorKind(404, "Validation", "invalid_request_error", "model_not_found"),
    RequestTimeoutError: ErrorKind(408, "Validation", "invalid_request_error", "request_timeout"),
    PayloadTooLargeError: ErrorKind(413, "Validation", "invalid_request_error", "payload_too_large"),
    HeadersTooLargeError: ErrorKind(431, "Validation", "invalid_request_error", "headers_too_large"),
    TooManyInputsError: ErrorKind(413, "Validation", "invalid_request_error", "too_many_inputs"),
    OverloadedError: ErrorKind(429, "Overloaded", "rate_limit_error", "rate_limit_exceeded"),
    ServerDrainingError: ErrorKind(503, "Unhealthy", "server_error", "shutting_down"),
    # A dead engine: 503 (this replica cannot serve; a load balancer routes elsewhere) WITHOUT Retry-After,
    # since this process will not recover: it exits for its supervisor to restart (--exit-on-engine-failure).
    EngineDeadError: ErrorKind(503, "Unhealthy", "server_error", "engine_dead", retry_after=False),
    EngineUnavailableError: ErrorKind(503, "Unhealthy", "server_error", "unavailable"),
    BatchDirInUseError: ErrorKind(503, "Unhealthy", "server_error", "batch_dir_in_use", retry_after=False),
    BatchDirUnwritableError: ErrorKind(
        503, "Unhealthy", "server_error", "batch_dir_unwritable", retry_after=False
    ),
    BatchOwnerUnavailableError: ErrorKind(503, "Unhealthy", "server_error", "batch_owner_unavailable"),
    RequestFailedError: SERVER_ERROR,
    Exception: SERVER_ERROR,
}
# TEI's door: the errors TEI answers with another status (its ErrorType Validation: 413, Backend: 424).
TEI_ERROR_TABLE: dict[type[Exception], ErrorKind] = {
    InputTooLongError: ErrorKind(413, "Validation", "invalid_request_error", "context_length_exceeded"),
    TaskNotSupportedError: ErrorKind(424, "Backend", "invalid_request_error", "unsupported_task"),
}
# Cohere's door: Cohere answers every body it cannot take 400 ("required fields are missing, or the values
# provided are not valid", docs.cohere.com/reference/errors), more texts than it takes in one call included.
COHERE_VALIDATION = ErrorKind(400, "Validation", "invalid_request_error")
COHERE_ERROR_TABLE: dict[type[Exception], ErrorKind] = {
    RequestValidationError: COHERE_VALIDATION,
    ValueError: COHERE_VALIDATION,
    TypeError: COHERE_VALIDATION,
    TooManyInputsError: ErrorKind(400, "Validation", "invalid_request_error", "too_many_inputs"),
}
DOOR_TABLES: dict[Door, tuple[dict[type[Exception], ErrorKind], ...]] = {
    Door.TEI: (TEI_ERROR_TABLE, ERROR_TABLE),
    Door.OPENAI: (ERROR_TABLE,),
    Door.COHERE: (COHERE_ERROR_TABLE, ERROR_TABLE),
}
# TEI's door: an empty list of inputs ("Batch is empty" in TEI's documents after v1.7.1; elsewhere: 422
# naming the field, as other bad input).
EMPTY_INPUTS = ErrorKind(400, "Empty", "invalid_request_error", "empty_inputs")
# (also the fields of the other bodies TEI's routes take: Cohere's on /rerank, OpenAI's on POST /)
_INPUT_LISTS = frozenset({"inputs", "texts", "inputs.sentences", "ids", "documents", "input"})

# Fields the engine names at the start of its error messages ("inputs[3]: ...", "dimensions (999) ...").
_ENGINE_FIELD = re.compile(r"^(inputs|dimensions|prompt_name|truncate|normalize)\b")
# A failed input's position and how many more failed, kept from a RequestFailedError's message in a 500.
_FAILED_INPUT = re.compile(r"^(inputs\[\d+\]: )?.*?( \(\d+ more inputs failed\))?$", re.DOTALL)
REQUEST_ID_HEADER = "X-Request-Id"


# Starlette's routing answers (and FastAPI's unreadable body), by status.
HTTP_ERROR_KINDS = {
    400: ErrorKind(400, "Validation", "invalid_request_error", "invalid_body"),
    404: ErrorKind(404, "NotFound", "invalid_request_error", "not_found"),
    405: ErrorKind(405, "MethodNotAllowed", "invalid_request_error", "method_not_allowed"),
}


def error_kind(error: BaseException, path: str) -> ErrorKind:
    """How ``error`` is answered on ``path``: its most specific class's kind (TEI's on TEI's door, Cohere's on
    Cohere's)."""
    if isinstance(error, HTTPException):  # routing: 404 unknown path, 405 wrong method
        if error.status_code in HTTP_ERROR_KINDS:
            return HTTP_ERROR_KINDS[error.status_code]
        tei_type = "Validation" if error.status_code < 500 else "Backend"
        openai_type = "invalid_request_error" if error.status_code < 500 else "server_error"
        return ErrorKind(error.status_code, tei_type, openai_type)
    door = door_of(path)
    if door is Door.TEI and _is_empty_inputs(error):
        return EMPTY_INPUTS
    for cls in type(error).__mro__:
        for table in DOOR_TABLES[door]:
            if cls in table:
                return table[cls]
    return SERVER_ERROR


def _is_empty_inputs(error: BaseException) -> bool:
    """The request's list of inputs (``inputs``, ``texts``, ``inputs.sentences``, ...) is empty, and nothing
    else is wrong."""
    if not isinstance(error, RequestValidationError) or not error.errors():
        return False
    return all(
        item.get("input") == [] and _location(item.get("loc", ())) in _INPUT_LISTS for item in error.errors()
    )


def error_response(
    error: BaseException, path: str, retry_after_seconds: int = 1, close: bool = False
) -> ORJSONResponse:
    """The answer to ``error`` on ``path``, in that route family's error shape (a 500 with a new request id
    in its message and its ``X-Request-Id`` header)."""
    kind = error_kind(error, path)
    message, param = _describe(error, kind)
    request_id = None
    if kind.status == 500:
        request_id = f"req_{secrets.token_hex(8)}"
        message = f"{message} (request id {request_id}; the server log has the details)"
    door = door_of(path)
    if door is Door.COHERE:  # (an engine's "inputs[i]: ..." names the i-th of texts / inputs)
        body: dict[str, Any] = {"id": request_id or str(uuid.uuid4()), "message": message}
    elif door is Door.OPENAI:
        if param == "inputs":
            param, message = "input", message.replace("inputs[", "input[").replace("inputs:", "input:")
        body = {
            "error": {"message": message, "type": kind.openai_type, "param": param, "code": kind.openai_code}
        }
        if path in TEI_OPENAI_PATHS:  # TEI's documented shape of its OpenAI route's errors, alongside
            body.update(message=message, code=kind.status, error_type=kind.tei_type)
    else:
        body = {"error": message, "error_type": kind.tei_type}
    headers = dict(getattr(error, "headers", None) or {})
    if kind.status in (429, 503) and kind.retry_after:
        headers["Retry-After"] = str(retry_after_seconds)
    if kind.status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    if close:
        headers["Connection"] = "close"
    if request_id is not None:
        headers[REQUEST_ID_HEADER] = request_id
    return ORJSONResponse(body, status_code=kind.status, headers=headers)


def _describe(error: BaseException, kind: ErrorKind) -> tuple[str, str | None]:
    """(message, the request field it is about)."""
    if kind is EMPTY_INPUTS:  # as TEI words it ("`inputs` cannot be empty")
        assert isinstance(error, RequestValidationError)  # _is_empty_inputs
        field = _location(error.errors()[0].get("loc", ()))
        return f"{field} cannot be empty; pass at least one input", field
    if isinstance(error, RequestValidationError):
        return _validation_message(error)
    if isinstance(error, HTTPException):
        return str(error.detail), None
    if kind.status == 500:
        message = _public_500_message(error)
        return message, "inputs" if message.startswith("inputs[") else None
    message = str(error) or type(error).__name__
    match = _ENGINE_FIELD.match(message)
    return message, match.group(1) if match else None


def _public_500_message(error: BaseException) -> str:
    """What a 500 tells the client: which input failed and how, never the exception's text (internals)."""
    if not isinstance(error, RequestFailedError):
        return "internal server error"
    match = _FAILED_INPUT.match(str(error))
    position, more = (match.group(1), match.group(2)) if match else (None, None)
    return f"{position or ''}the forward pass failed for this input{more or ''}"


def _validation_message(error: RequestValidationError) -> tuple[str, str | None]:
    parts: list[str] = []
    params: list[str] = []
    for item in error.errors():
        location = _location(item.get("loc", ()))
        kind = item.get("type")
        message = str(item.get("msg", "is invalid")).removeprefix("Value error, ")
        if kind == "json_invalid":
            reason = (item.get("ctx") or {}).get("error", "")
            location, message = "", f"the body is not valid JSON ({reason}); send a JSON object"
        elif kind == "extra_forbidden":
            message = "is not a field of this request; remove it"
        elif kind == "unknown_fields" and not location:  # --strict-request-fields: the message names them
            params.append(str((item.get("ctx") or {}).get("fields", "")).split(", ")[0])
        elif kind == "missing" and not location:
            message = "the request body is missing; send a JSON object"
        elif not location:  # the body parsed, but is not an object (or was not sent as JSON)
            message = f"the body must be a JSON object sent as Content-Type: application/json ({message})"
        parts.append(f"{location}: {message}" if location else message)
        if location:
            params.append(location)
    return "; ".join(parts) or "invalid request", params[0] if params else None


# Tags of discriminated request unions (``/rerank``: TEI's or Cohere's body) that pydantic puts in locations.
_UNION_TAGS = frozenset({"tei", "cohere"})


def _location(loc: Any) -> str:
    """('body', 'inputs', 3) -> 'inputs[3]'; ('body', 'cohere', 'top_n') -> 'top_n'."""
    text = ""
    for index, part in enumerate(loc):
        if (part == "body" and not text) or (index == 1 and loc[0] == "body" and part in _UNION_TAGS):
            continue
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def explain_http_error(request: Request, error: HTTPException) -> HTTPException:
    """Starlette's bare "Not Found" / "Method Not Allowed" and FastAPI's "There was an error parsing the
    body", reworded to say what was wrong and what to do."""
    method, path = request.method, request.url.path
    detail = error.detail
    if error.status_code == 404:
        detail = f"no route {method} {path}; GET /docs (or /openapi.json) lists the routes"
    elif error.status_code == 405:
        allowed = (error.headers or {}).get("Allow", "")
        detail = f"{path} does not take {method}; use {allowed or 'another method'}"
    elif error.status_code == 400 and isinstance(error.__cause__, UnicodeDecodeError):
        cause = error.__cause__
        detail = (
            f"the body is not valid UTF-8 (byte 0x{cause.object[cause.start]:02x} at offset {cause.start}); "
            "send JSON encoded as UTF-8"
        )
    elif error.status_code == 400 and error.__cause__ is not None:
        detail = f"the body could not be read ({type(error.__cause__).__name__}); send a JSON object"
    return HTTPException(error.status_code, detail, headers=error.headers)


def install_error_handlers(app: FastAPI, retry_after_seconds: int) -> None:
    # Starlette's ServerErrorMiddleware re-raises what the Exception handler answered, for the server
    # (uvicorn) to log again with its traceback: the line below has it already.
    logging.getLogger("uvicorn.error").addFilter(_ALREADY_LOGGED)

    async def handle(request: Request, error: Exception) -> ORJSONResponse:
        if isinstance(error, HTTPException):
            error = explain_http_error(request, error)
        response = error_response(error, request.url.path, retry_after_seconds)
        if response.status_code == 500:
            log_server_error(request, error, response.headers.get(REQUEST_ID_HEADER, "-"))
        return response

    # Exception itself goes to Starlette's ServerErrorMiddleware: rendered here, then re-raised and logged.
    handled: list[type[Exception]] = [HTTPException, *ERROR_TABLE]
    for cls in handled:
        app.add_exception_handler(cls, handle)


def log_server_error(request: Request, error: BaseException, request_id: str) -> None:
    """The one log line of a 500: the request id the client got, and the exception (with the traceback of an
    unexpected one; a failed forward pass has its own in the engine's log)."""
    traceback = None if isinstance(error, RequestFailedError) else error
    logger.error(
        "%s %s -> 500 [%s]: %r", request.method, request.url.path, request_id, error, exc_info=traceback
    )
    with contextlib.suppress(AttributeError):  # (an exception type without a __dict__)
        error.__wde_logged__ = True  # type: ignore[attr-defined]


class _AlreadyLoggedFilter(logging.Filter):
    """Drops the server's "Exception in ASGI application" record of an exception ``log_server_error``
    logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not getattr(error, "__wde_logged__", False)


_ALREADY_LOGGED = _AlreadyLoggedFilter()
