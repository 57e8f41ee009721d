"""TEI ``POST /embed``: ``{"inputs": ...}`` -> ``[[float, ...], ...]``, one vector per input."""

from __future__ import annotations

from typing import cast

from fastapi import APIRouter, Request

from server.app_state import get_state
from server.json_body_route import JsonBodyRoute
from server.observability.access_log import record_usage
from server.protocols.tei import EmbedRequest
from server.responses import ORJSONResponse
from server.routes import held_engine
from server.served_models.model_registry import EMBED
from wde.entrypoints.task_options import EncodeOptions
from wde.outputs import EmbeddingOutput

router = APIRouter(tags=["TEI"], route_class=JsonBodyRoute)


@router.post("/embed", response_model=list[list[float]], response_class=ORJSONResponse)
async def embed(body: EmbedRequest, request: Request) -> ORJSONResponse:
    state = get_state(request)
    # 1. limits
    state.check_num_inputs(len(body.inputs), "inputs")
    # 2. the engine (bad input raises: 422 / 400)
    options = EncodeOptions(
        normalize=body.normalize,
        dimensions=body.dimensions,
        truncate=body.truncate,
        prompt_name=body.prompt_name,
        output="dense",  # a SPLADE model answers 400 naming POST /embed_sparse
        precision=body.precision,
        long_input=body.long_input,
        truncation_direction=body.truncation_direction,
    )
    async with state.models.use(body.model, EMBED) as model:
        outputs = await held_engine(model).encode(body.inputs, **options)
    record_usage(request.state, len(outputs), sum(output.num_tokens for output in outputs))
    # 3. float32 (or quantized int8 / uint8) vectors straight to orjson
    return ORJSONResponse([output.embedding for output in cast(list[EmbeddingOutput], outputs)])
