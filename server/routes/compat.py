"""TEI's ``POST /`` and ``POST /invocations`` (SageMaker): one route that does what the served model does.

Every huggingface_hub-based client posts here (``InferenceClient(model=URL).feature_extraction``,
LlamaIndex's and Haystack's HF-API embedders, litellm's ``huggingface/`` embeddings). An embedding model
embeds (``{"inputs"}`` as ``/embed``, or as ``/embed_sparse`` for a SPLADE model, as TEI does;
``{"input"}`` as ``/v1/embeddings``; ``{"inputs": {"source_sentence", "sentences"}}`` as ``/similarity``,
what ``InferenceClient.sentence_similarity`` sends); a cross-encoder or classifier reranks (``{"query",
"texts" | "documents"}`` as ``/rerank``) or predicts (``{"inputs"}`` as ``/predict``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import TypeAdapter, ValidationError

from server.app_state import get_state
from server.protocols.cohere import AnyRerankRequest, CohereRerankRequest
from server.protocols.openai import EmbeddingRequest
from server.protocols.tei import (
    EmbedAllRequest,
    EmbedRequest,
    EmbedSparseRequest,
    PredictRequest,
    RerankRequest,
    SimilarityRequest,
)
from server.responses import ORJSONResponse
from server.routes import embed, embed_all, embed_sparse, openai, predict, rerank, similarity
from wde.config import ModelConfig
from wde.entrypoints.engine_thread import EngineUnavailableError

router = APIRouter(tags=["TEI"])

_EMBED = TypeAdapter(EmbedRequest)
_OPENAI = TypeAdapter(EmbeddingRequest)
_RERANK = TypeAdapter(AnyRerankRequest)
_PREDICT = TypeAdapter(PredictRequest)
_SPARSE = TypeAdapter(EmbedSparseRequest)
_ALL = TypeAdapter(EmbedAllRequest)
_SIMILARITY = TypeAdapter(SimilarityRequest)
DESCRIPTION = (
    "An embedding model: the body of POST /embed, or of POST /embed_sparse for a SPLADE model, or of "
    "POST /embed_all for a ColBERT model (or of POST /v1/embeddings, with `input`; of POST /similarity, "
    "with `inputs` {source_sentence, sentences}). A cross-encoder or "
    "classifier: the body of POST /rerank (with `query`) or of POST /predict."
)
# the TEI route and body of an embedding model's own (first) output kind
_INPUTS_BODIES = {"dense": EmbedRequest, "sparse": EmbedSparseRequest, "multi_vector": EmbedAllRequest}


def root_bodies(model_config: ModelConfig) -> tuple[str, ...]:
    """The request models POST / takes for this model (as dispatched below; /openapi.json documents them)."""
    if model_config.task == "score":
        return (RerankRequest.__name__, CohereRerankRequest.__name__, PredictRequest.__name__)
    bodies = (_INPUTS_BODIES[model_config.outputs[0]].__name__, EmbeddingRequest.__name__)
    return (*bodies, SimilarityRequest.__name__) if "dense" in model_config.outputs else bodies


@router.post("/", response_class=ORJSONResponse, description=DESCRIPTION)
@router.post("/invocations", response_class=ORJSONResponse, description=DESCRIPTION)
async def compat(request: Request, body: dict[str, Any] = Body(...)) -> Response:  # noqa: B008
    state = get_state(request)
    model = body.get("model")
    model_config = state.models.resolve(model if isinstance(model, str) else None).model_config
    if model_config is None:  # still loading
        raise EngineUnavailableError("the model is loading; retry when GET /health answers 200")
    if model_config.task == "embed":
        if isinstance(body.get("inputs"), dict):  # the Hub's sentence-similarity task (InferenceClient)
            return await similarity.similarity(validate_body(_SIMILARITY, body), request)
        if "input" in body:
            return await openai.create_embeddings(validate_body(_OPENAI, body), request)
        if model_config.outputs[0] == "sparse":
            return await embed_sparse.embed_sparse(validate_body(_SPARSE, body), request)
        if model_config.outputs[0] == "multi_vector":
            return await embed_all.embed_all(validate_body(_ALL, body), request)
        return await embed.embed(validate_body(_EMBED, body), request)
    if "query" in body:
        return await rerank.rerank(validate_body(_RERANK, body), request)
    return await predict.predict(validate_body(_PREDICT, body), request)


def validate_body(adapter: TypeAdapter, body: dict[str, Any]) -> Any:
    """``body`` as ``adapter``'s model, refused as FastAPI refuses a route's own body (422 naming fields)."""
    try:
        return adapter.validate_python(body)
    except ValidationError as e:
        raise RequestValidationError(
            [{**error, "loc": ("body", *error["loc"])} for error in e.errors()]
        ) from e
