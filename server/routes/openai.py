"""OpenAI-compatible ``POST /v1/embeddings`` and ``GET /v1/models``."""

from __future__ import annotations

import base64

import numpy as np
from fastapi import APIRouter, Request

from server.access_log import record_usage
from server.app_state import get_state
from server.protocol import EmbeddingRequest, EmbeddingResponse, ModelList
from server.responses import ORJSONResponse
from wde.inputs import PoolingParams

router = APIRouter(prefix="/v1", tags=["OpenAI"])


@router.post("/embeddings", response_model=EmbeddingResponse, response_class=ORJSONResponse)
async def create_embeddings(body: EmbeddingRequest, request: Request) -> ORJSONResponse:
    state = get_state(request)
    # 1. the model and the limits
    state.check_model(body.model)
    state.check_num_inputs(len(body.input), "input")
    if any(isinstance(item, dict) for item in body.input):
        state.warn_token_ids_once()
    # 2. the engine (bad input raises: 422 / 400); normalization: the model's default, as LLM.encode
    params = PoolingParams(dimensions=body.dimensions, output="dense")
    outputs = await state.engine.encode(body.input, params)
    # 3. the response, vectors as float lists or base64 of little-endian float32
    encode = _base64 if body.encoding_format == "base64" else _identity
    num_tokens = sum(output.num_tokens for output in outputs)
    record_usage(request.state, len(outputs), num_tokens)
    return ORJSONResponse(
        {
            "object": "list",
            "data": [
                {"object": "embedding", "index": index, "embedding": encode(output.embedding)}
                for index, output in enumerate(outputs)
            ],
            "model": state.served_model_name,
            "usage": {"prompt_tokens": num_tokens, "total_tokens": num_tokens},
        }
    )


@router.get("/models", response_model=ModelList, response_class=ORJSONResponse)
async def list_models(request: Request) -> ORJSONResponse:
    state = get_state(request)
    card = {"id": state.served_model_name, "object": "model", "created": state.created, "owned_by": "wde"}
    return ORJSONResponse({"object": "list", "data": [card]})


def _base64(embedding: np.ndarray) -> str:
    return base64.b64encode(embedding.astype("<f4", copy=False).tobytes()).decode("ascii")


def _identity(embedding: np.ndarray) -> np.ndarray:
    return embedding
