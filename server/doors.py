"""Which peer's conventions a route follows, its door: TEI's, OpenAI's (with vLLM's, Cohere's / Jina's rerank
and Infinity's routes, which answer OpenAI's error shape too), or Cohere's (its embed routes, which Cohere's
SDKs alone call: Cohere's ``{"id", "message"}`` and the statuses Cohere documents).

The door decides an error's body shape and, for the few errors whose status the peers disagree on, its
status (``server/error_answers.py``): TEI's router answers each of its ``ErrorType`` with one status
(``router/src/http/server.rs``: Validation 413, Backend 424, Empty 400, Tokenizer 422, Overloaded 429,
Unhealthy 503), so on TEI's routes an over-long input with truncation off is 413 and a route the model does
not serve 424, where OpenAI's convention (and vLLM's, Cohere's) is 400 ``invalid_request_error``. Cohere
answers every invalid body 400 (no 422; too many texts too), which its embed routes follow.
A path is decided by its path alone: ``/rerank`` is TEI's door whether it gets TEI's or Cohere's body.
"""

from __future__ import annotations

from enum import Enum

# vLLM's unversioned pooling routes and the unversioned OpenAI / Infinity ones (the rest: /v1/*, /v2/*).
OPENAI_SHAPED_PATHS = frozenset({"/score", "/classify", "/pooling", "/embeddings", "/models"})
# TEI's OpenAI route: its errors carry TEI's OpenAICompatErrorResponse fields (message, code, error_type) too.
TEI_OPENAI_PATHS = frozenset({"/v1/embeddings", "/embeddings"})
# Cohere's embed API (v1 and v2): Cohere's error shape and statuses. (/v1/rerank and /v2/rerank, which Jina's,
# vLLM's and Infinity's clients call too, keep OpenAI's.)
COHERE_PATHS = frozenset({"/v1/embed", "/v2/embed"})
# TEI's routes that run the model, where a model that serves another task or output kind answers 424
# (/openapi.json documents it there; /tokenize and /decode serve every model).
TEI_MODEL_PATHS = frozenset(
    {"/embed", "/embed_all", "/embed_sparse", "/predict", "/rerank", "/similarity", "/", "/invocations"}
)


class Door(Enum):
    TEI = "tei"
    OPENAI = "openai"
    COHERE = "cohere"


def is_openai_path(path: str) -> bool:
    """Versioned routes (OpenAI /v1/*, Cohere-style /v1/rerank and /v2/rerank) and vLLM's / the unversioned
    OpenAI routes answer OpenAI's error shape."""
    return path.startswith(("/v1/", "/v2/")) or path in OPENAI_SHAPED_PATHS


def door_of(path: str) -> Door:
    """Cohere's embed routes: Cohere; TEI's routes (its /embed, /rerank, /predict, ..., POST / and the health
    routes) and unknown paths: TEI; the rest: OpenAI."""
    if path in COHERE_PATHS:
        return Door.COHERE
    return Door.OPENAI if is_openai_path(path) else Door.TEI
