"""The unversioned OpenAI-shaped routes: ``POST /embeddings`` (TEI serves its OpenAI route there too;
Infinity's clients post there) and Infinity's ``GET /models`` (OpenAI's cards with Infinity's ``stats``,
``backend`` and ``capabilities``)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from server.app_state import get_state
from server.json_body_route import JsonBodyRoute
from server.protocols.infinity import InfinityModelList, UnversionedEmbeddingRequest
from server.protocols.openai import EmbeddingResponse
from server.responses import ORJSONResponse
from server.routes import openai

router = APIRouter(tags=["OpenAI", "Infinity"], route_class=JsonBodyRoute)

# Infinity's capability names by our task.
CAPABILITIES = {"embed": ["embed"], "score": ["rerank", "classify"]}


@router.post("/embeddings", response_model=EmbeddingResponse, response_class=ORJSONResponse)
async def embeddings(body: UnversionedEmbeddingRequest, request: Request) -> Response:
    return await openai.create_embeddings(body, request)


@router.get("/models", response_model=InfinityModelList, response_class=ORJSONResponse)
async def list_models(request: Request) -> ORJSONResponse:
    state = get_state(request)
    cards = [
        {
            "id": model.name,
            "object": "model",
            "created": state.created,
            "owned_by": "infinity",  # infinity_client reads this field as an enum of one name
            "stats": {},
            "backend": "wde",
            "capabilities": CAPABILITIES.get(model.task or "", []),
        }
        for model in state.models.models
    ]
    return ORJSONResponse({"object": "list", "data": cards})
