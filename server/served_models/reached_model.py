"""``ReachedModel``: which served model an HTTP request reached, for the HTTP metrics' ``model`` label
(not ``server.protocols.common.RequestModel``, the base of request bodies).

``RequestPipeline`` puts a ``ReachedModel`` in a context variable for each request, and
``ModelRegistry.use`` names the model in it. A task the request starts copies the context and so holds the
same object: the name reaches the middleware whichever task resolved the model.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

CURRENT_REACHED_MODEL: ContextVar[ReachedModel | None] = ContextVar("wde_reached_model", default=None)


@dataclass
class ReachedModel:
    # the served name; "" while no route has resolved a model (probes, /info, errors before the handler ran)
    name: str = ""


def note_reached_model(name: str) -> None:
    """Name the model the current HTTP request reached (a no-op outside one)."""
    reached_model = CURRENT_REACHED_MODEL.get()
    if reached_model is not None:
        reached_model.name = name
