"""``error_answer``: a 404 / 409 in OpenAI's error shape, for ids the Batch API does not know.

(``server/error_answers.py``'s table maps exception types to statuses; these answers carry the object kind
and id in their message, and are returned by the handlers of ``/v1/files`` and ``/v1/batches``.)
"""

from __future__ import annotations

from server.responses import ORJSONResponse


def error_answer(status: int, message: str, param: str | None, code: str) -> ORJSONResponse:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}
    return ORJSONResponse(body, status_code=status)


def not_found(kind: str, object_id: str, param: str, listing: str) -> ORJSONResponse:
    return error_answer(
        404, f"no {kind} {object_id!r} on this server; {listing} lists them", param, f"{kind}_not_found"
    )
