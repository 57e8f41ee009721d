"""Cohere's embed API: ``POST /v2/embed`` (``cohere.ClientV2.embed``) and ``POST /v1/embed``
(``cohere.Client.embed``), beside the Cohere rerank routes.

Cohere's fields as wde's: ``input_type`` is a text's side and prompt (``search_query`` /
``search_document``: ``PoolingParams.input_type`` query / document, as ``/v1/embeddings`` takes it; a prompt
of the model named as the input type, case aside, wins: nomic's ``Classification``), ``truncate`` the cut
(NONE: refuse an over-long input; START: cut its start, TEI's ``truncation_direction`` left; END: its end),
``output_dimension`` the Matryoshka ``dimensions``, ``max_tokens`` the cut length (vLLM's
``truncate_prompt_tokens``), and ``embedding_types`` the encodings (``server/routes/embedding_types.py``).
Errors answer on Cohere's door (``server/doors.py``): ``{"id", "message"}``, 400 for any body it cannot take.
"""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Request, Response

from server.app_state import get_state
from server.json_body_route import JsonBodyRoute
from server.observability.access_log import record_usage
from server.protocols.cohere import (
    CohereEmbedBody,
    CohereEmbedByTypeResponse,
    CohereEmbedFloatsResponse,
    CohereEmbedRequest,
    CohereEmbedV1Request,
)
from server.responses import ORJSONResponse
from server.routes import held_engine
from server.routes.embedding_types import FLOAT, embeddings_by_type
from server.served_models.model_registry import EMBED
from wde.config import ModelConfig
from wde.engine.errors import InputTooLongError
from wde.entrypoints.task_options import EncodeOptions

router = APIRouter(tags=["Cohere"], route_class=JsonBodyRoute)

# Cohere's input types that are a side of a text (its prompt; a ColBERT model's query or document side).
SIDES = {"search_query": "query", "search_document": "document"}
# Cohere's truncate as wde's (truncate, truncation_direction).
TRUNCATION = {"NONE": (False, "right"), "START": (True, "left"), "END": (True, "right")}


@router.post("/v2/embed", response_model=CohereEmbedByTypeResponse, response_class=ORJSONResponse)
async def embed_v2(body: CohereEmbedRequest, request: Request) -> Response:
    return await cohere_embed(body, request, api_version="2")


@router.post(
    "/v1/embed",
    response_model=CohereEmbedFloatsResponse | CohereEmbedByTypeResponse,
    response_class=ORJSONResponse,
)
async def embed_v1(body: CohereEmbedV1Request, request: Request) -> Response:
    return await cohere_embed(body, request, api_version="1")


async def cohere_embed(body: CohereEmbedBody, request: Request, api_version: str) -> ORJSONResponse:
    state = get_state(request)
    texts = body.input_texts()
    # 1. the limits
    state.check_num_inputs(len(texts), body.input_field())
    # 2. the model (404 for one not served) and the engine: one forward pass, each type from it
    async with state.models.use(body.model, EMBED) as model:
        engine = held_engine(model)
        options = encode_options(body, engine.info.model_config)
        try:
            embeddings, num_tokens = await embeddings_by_type(
                engine, texts, options, body.embedding_types or [FLOAT]
            )
        except InputTooLongError as e:  # the engine's advice in this API's words
            raise InputTooLongError(str(e).replace("pass truncate=True", "send truncate END or START")) from e
    record_usage(request.state, len(texts), num_tokens)
    # 3. Cohere's shape: by type, or (v1 without embedding_types) the float vectors themselves
    answer: dict[str, Any] = {
        "id": str(uuid.uuid4()),
        "embeddings": embeddings,
        "texts": texts,
        "meta": {"api_version": {"version": api_version}, "billed_units": {"input_tokens": num_tokens}},
        "response_type": "embeddings_by_type",
    }
    if api_version == "1" and body.embedding_types is None:
        answer.update(embeddings=embeddings[FLOAT], response_type="embeddings_floats")
    return ORJSONResponse(answer)


def encode_options(body: CohereEmbedBody, model_config: ModelConfig) -> EncodeOptions:
    """The engine's options for a Cohere body (dense float32 output; the types are encoded from it)."""
    truncate, direction = TRUNCATION[body.truncate] if body.truncate else (None, "right")
    max_input_tokens = None
    if body.max_tokens is not None and body.max_tokens < model_config.max_model_len:
        truncate, max_input_tokens = True, body.max_tokens  # (truncate NONE with max_tokens: refused)
    if body.output_dimension is not None and body.output_dimension > model_config.embedding_size:
        raise ValueError(
            f"output_dimension ({body.output_dimension}) is more than the model's embedding size "
            f"({model_config.embedding_size}); send at most that, or none for every dimension"
        )
    side, prompt_name = side_and_prompt(body.input_type, model_config.prompts)
    return EncodeOptions(
        dimensions=body.output_dimension,
        truncate=truncate,
        prompt_name=prompt_name,
        output="dense",  # a SPLADE model answers 400 naming its outputs
        input_type=side,
        truncation_direction=direction,
        max_input_tokens=max_input_tokens,
    )


def side_and_prompt(input_type: str | None, prompts: dict[str, str]) -> tuple[str | None, str | None]:
    """``PoolingParams``' ``input_type`` (the engine then picks the model's prompt of that name, as for
    ``/v1/embeddings``) and ``prompt_name`` (a prompt named as Cohere's input type, case aside) for Cohere's
    ``input_type``; None and None: the model's default prompt."""
    if input_type is None:
        return None, None
    named = [name for name in prompts if name.lower() == input_type]
    return SIDES.get(input_type), named[0] if named else None
