"""``RequestModel``: which served model an HTTP request reached, for the HTTP metrics' ``model`` label.

``HttpMetricsMiddleware`` puts a ``RequestModel`` in a context variable for each request, and
``ModelRegistry.use`` names the model in it. A task the request starts copies the context and so holds the
same object: the name reaches the middleware whichever task resolved the model.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

CURRENT_REQUEST_MODEL: ContextVar[RequestModel | None] = ContextVar("wde_request_model", default=None)


@dataclass
class RequestModel:
    # the served name; "" while no route has resolved a model (probes, /info, errors before the handler ran)
    name: str = ""


def note_request_model(name: str) -> None:
    """Name the model the current HTTP request reached (a no-op outside one)."""
    request_model = CURRENT_REQUEST_MODEL.get()
    if request_model is not None:
        request_model.name = name
