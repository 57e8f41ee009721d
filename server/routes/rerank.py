"""Rerank routes: TEI ``POST /rerank`` and Cohere/Jina-style ``POST /v1/rerank`` and ``/v2/rerank``.

A cross-encoder scores each (query, document) pair with its classifier; an embedding model by cosine
similarity. Results are sorted by score, highest first, each with the document's original index.
``/rerank`` answers in the shape of the request's family: TEI's ``{"query", "texts"}`` gets TEI's list of
ranks; ``{"query", "documents"}`` (what vLLM and Infinity accept there, and litellm's ``hosted_vllm/`` and
``infinity/`` providers send) gets the Cohere shape, as vLLM answers it.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from fastapi import APIRouter, Request

from server.app_state import get_state
from server.observability.access_log import record_usage
from server.protocols.cohere import AnyRerankRequest, CohereRerankRequest, CohereRerankResponse
from server.protocols.common import truncation_of
from server.protocols.tei import Rank, RerankRequest
from server.responses import ORJSONResponse
from server.routes import held_engine
from server.served_models.model_registry import SCORE

router = APIRouter(tags=["rerank"])


@router.post("/rerank", response_model=list[Rank] | CohereRerankResponse, response_class=ORJSONResponse)
async def rerank(body: AnyRerankRequest, request: Request) -> ORJSONResponse:
    if isinstance(body, CohereRerankRequest):
        return await cohere_rerank(body, request, api_version="1")
    return await tei_rerank(body, request)


@router.post("/v1/rerank", response_model=CohereRerankResponse, response_class=ORJSONResponse)
async def rerank_v1(body: CohereRerankRequest, request: Request) -> ORJSONResponse:
    return await cohere_rerank(body, request, api_version="1")


@router.post("/v2/rerank", response_model=CohereRerankResponse, response_class=ORJSONResponse)
async def rerank_v2(body: CohereRerankRequest, request: Request) -> ORJSONResponse:
    return await cohere_rerank(body, request, api_version="2")


async def tei_rerank(body: RerankRequest, request: Request) -> ORJSONResponse:
    state = get_state(request)
    # 1. limits
    state.check_num_inputs(len(body.texts), "texts")
    # 2. the engine (bad input raises: 422 / 400)
    async with state.models.use(body.model, SCORE) as model:
        results, num_tokens = await held_engine(model).rerank(
            body.query,
            body.texts,
            return_documents=body.return_text,
            raw_scores=body.raw_scores,
            truncate=body.truncate,
            instruction=body.instruction,
            long_input=body.long_input,
            chunk_score=body.chunk_score,
            truncation_direction=body.truncation_direction,
        )
    record_usage(request.state, len(body.texts), num_tokens)
    # 3. TEI's shape: [{"index", "score", "text"?}], best first
    ranks: list[dict[str, Any]] = []
    for result in results:
        rank: dict[str, Any] = {"index": result.index, "score": result.score}
        if body.return_text:
            rank["text"] = result.document
        ranks.append(rank)
    return ORJSONResponse(ranks)


async def cohere_rerank(body: CohereRerankRequest, request: Request, api_version: str) -> ORJSONResponse:
    state = get_state(request)
    # 1. the limits
    state.check_num_inputs(len(body.documents), "documents")
    # 2. the model (404 for one not served) and the engine
    truncate, max_input_tokens = truncation_of(body.truncate_prompt_tokens)
    async with state.models.use(body.model, SCORE) as model:
        results, num_tokens = await held_engine(model).rerank(
            body.query,
            body.document_texts(),
            top_n=body.top_n,
            raw_scores=body.raw_scores,
            truncate=truncate,
            max_tokens_per_doc=body.max_tokens_per_doc,
            instruction=body.instruction,
            long_input=body.long_input,
            chunk_score=body.chunk_score,
            truncation_direction=body.truncation_side,
            max_input_tokens=max_input_tokens,
        )
    record_usage(request.state, len(body.documents), num_tokens)
    # 3. Cohere's shape (with Jina's model / usage, vLLM's and Infinity's object / created alongside)
    entries = []
    for result in results:
        entry: dict[str, Any] = {"index": result.index, "relevance_score": result.score}
        if body.return_documents:
            document = body.documents[result.index]
            entry["document"] = {"text": document} if isinstance(document, str) else document
        entries.append(entry)
    return ORJSONResponse(
        {
            "id": str(uuid.uuid4()),
            "results": entries,
            "meta": {"api_version": {"version": api_version}, "billed_units": {"search_units": 1}},
            "model": model.name,
            "usage": {"prompt_tokens": num_tokens, "total_tokens": num_tokens},
            "object": "rerank",
            "created": int(time.time()),
        }
    )
