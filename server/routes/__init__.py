"""One module per route group, each exposing ``router`` (a FastAPI ``APIRouter``); ``server.app`` includes
every module listed in ``ROUTE_MODULES`` there (``embedding_types.py`` is no route group: the encodings of
Cohere's ``embedding_types``, beside ``cohere_embed.py`` which uses them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from server.served_models.model_registry import ServedModel
    from wde.entrypoints.async_llm_engine import AsyncLLMEngine


def held_engine(model: ServedModel) -> AsyncLLMEngine:
    """The engine of a model held by ``ModelRegistry.use`` (loaded, and kept so until the block ends)."""
    engine = model.engine
    if engine is None:
        raise RuntimeError(f"model {model.name!r} is not loaded; use it inside ModelRegistry.use")
    return engine
