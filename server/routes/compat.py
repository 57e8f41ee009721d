"""TEI's ``POST /`` and ``POST /invocations`` (SageMaker): one route that does what the served model does.

Every huggingface_hub-based client posts here (``InferenceClient(model=URL).feature_extraction``,
LlamaIndex's and Haystack's HF-API embedders, litellm's ``huggingface/`` embeddings). An embedding model
embeds (``{"inputs"}`` as ``/embed``, ``{"input"}`` as ``/v1/embeddings``); a cross-encoder or classifier
reranks (``{"query", "texts" | "documents"}`` as ``/rerank``) or predicts (``{"inputs"}`` as ``/predict``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Request
from fastapi.exceptions import RequestValidationError
from pydantic import TypeAdapter, ValidationError

from server.app_state import get_state
from server.protocol import (
    AnyRerankRequest,
    CohereRerankRequest,
    EmbeddingRequest,
    EmbedRequest,
    PredictRequest,
    RerankRequest,
)
from server.responses import ORJSONResponse
from server.routes import embed, openai, predict, rerank

router = APIRouter(tags=["TEI"])

_EMBED = TypeAdapter(EmbedRequest)
_OPENAI = TypeAdapter(EmbeddingRequest)
_RERANK = TypeAdapter(AnyRerankRequest)
_PREDICT = TypeAdapter(PredictRequest)
# The request models each task's POST / takes (as dispatched below; /openapi.json documents them).
ROOT_BODIES: dict[str, tuple[str, ...]] = {
    "embed": (EmbedRequest.__name__, EmbeddingRequest.__name__),
    "score": (RerankRequest.__name__, CohereRerankRequest.__name__, PredictRequest.__name__),
}
DESCRIPTION = (
    "An embedding model: the body of POST /embed (or of POST /v1/embeddings, with `input`). "
    "A cross-encoder or classifier: the body of POST /rerank (with `query`) or of POST /predict."
)


@router.post("/", response_class=ORJSONResponse, description=DESCRIPTION)
@router.post("/invocations", response_class=ORJSONResponse, description=DESCRIPTION)
async def compat(request: Request, body: dict[str, Any] = Body(...)) -> ORJSONResponse:  # noqa: B008
    task = get_state(request).engine.info.model_config.task
    if task == "embed":
        if "input" in body:
            return await openai.create_embeddings(_validate(_OPENAI, body), request)
        return await embed.embed(_validate(_EMBED, body), request)
    if "query" in body:
        return await rerank.rerank(_validate(_RERANK, body), request)
    return await predict.predict(_validate(_PREDICT, body), request)


def _validate(adapter: TypeAdapter, body: dict[str, Any]) -> Any:
    try:
        return adapter.validate_python(body)
    except ValidationError as e:
        raise RequestValidationError(
            [{**error, "loc": ("body", *error["loc"])} for error in e.errors()]
        ) from e
