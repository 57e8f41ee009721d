"""TEI's ``POST /`` and ``POST /invocations`` (SageMaker): one route that does what the served model does.

Every huggingface_hub-based client posts here (``InferenceClient(model=URL).feature_extraction``,
LlamaIndex's and Haystack's HF-API embedders, litellm's ``huggingface/`` embeddings). An embedding model
embeds (``{"inputs"}`` as ``/embed``, or as ``/embed_sparse`` for a SPLADE model, as TEI does;
``{"input"}`` as ``/v1/embeddings``); a cross-encoder or classifier reranks (``{"query", "texts" |
"documents"}`` as ``/rerank``) or predicts (``{"inputs"}`` as ``/predict``).
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
    EmbedSparseRequest,
    PredictRequest,
    RerankRequest,
)
from server.responses import ORJSONResponse
from server.routes import embed, embed_sparse, openai, predict, rerank
from wde.config import ModelConfig

router = APIRouter(tags=["TEI"])

_EMBED = TypeAdapter(EmbedRequest)
_OPENAI = TypeAdapter(EmbeddingRequest)
_RERANK = TypeAdapter(AnyRerankRequest)
_PREDICT = TypeAdapter(PredictRequest)
_SPARSE = TypeAdapter(EmbedSparseRequest)
DESCRIPTION = (
    "An embedding model: the body of POST /embed, or of POST /embed_sparse for a SPLADE model (or of "
    "POST /v1/embeddings, with `input`). A cross-encoder or classifier: the body of POST /rerank (with "
    "`query`) or of POST /predict."
)


def root_bodies(model_config: ModelConfig) -> tuple[str, ...]:
    """The request models POST / takes for this model (as dispatched below; /openapi.json documents them)."""
    if model_config.task == "score":
        return (RerankRequest.__name__, CohereRerankRequest.__name__, PredictRequest.__name__)
    inputs_body = EmbedSparseRequest if _is_sparse(model_config) else EmbedRequest
    openai_body = (EmbeddingRequest.__name__,) if "dense" in model_config.outputs else ()
    return (inputs_body.__name__, *openai_body)


def _is_sparse(model_config: ModelConfig) -> bool:
    return model_config.outputs[0] == "sparse"


@router.post("/", response_class=ORJSONResponse, description=DESCRIPTION)
@router.post("/invocations", response_class=ORJSONResponse, description=DESCRIPTION)
async def compat(request: Request, body: dict[str, Any] = Body(...)) -> ORJSONResponse:  # noqa: B008
    model_config = get_state(request).engine.info.model_config
    if model_config.task == "embed":
        if "input" in body:
            return await openai.create_embeddings(_validate(_OPENAI, body), request)
        if _is_sparse(model_config):
            return await embed_sparse.embed_sparse(_validate(_SPARSE, body), request)
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
