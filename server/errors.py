"""The server's own exceptions, raised by the routes, middlewares and the Batch API; how each is answered
(status, body shape per door) is ``server/error_answers.py``'s table. Plain classes: the engine process
and the launchers import them without FastAPI."""

from __future__ import annotations


class PayloadTooLargeError(Exception):
    """The request body is larger than --payload-limit."""


class TooManyInputsError(Exception):
    """More inputs in one request than --max-client-batch-size."""


class OverloadedError(Exception):
    """--max-concurrent-requests requests are in flight already."""


class BatchDirInUseError(Exception):
    """Another process holds --batch-dir: this one serves no Batch API (answered 503, no Retry-After)."""


class BatchDirUnwritableError(Exception):
    """--batch-dir cannot be written (a read-only filesystem): no Batch API here (503, no Retry-After)."""


class BatchOwnerUnavailableError(Exception):
    """--api-workers N: the API worker that runs the Batch API does not answer (restarting, or stopping);
    the others answer its requests 503 with Retry-After (``server/batches/batch_link.py``)."""


class ServerDrainingError(Exception):
    """The server is shutting down and takes no new requests."""


class UnauthorizedError(Exception):
    """Missing or wrong API key."""


class RequestTimeoutError(Exception):
    """The request's headers or body took longer than --header-read-timeout / --body-read-timeout."""


class HeadersTooLargeError(Exception):
    """The request line and headers are larger than --max-header-bytes."""


class ModelNotFoundError(Exception):
    """The request names a model this server does not serve."""


class UnpairedFieldsError(ValueError):
    """Fields each valid that do not go together (vLLM's /score text_1 and text_2 of unpairable lengths,
    dimensions with task classify): 400, as vLLM answers them."""
