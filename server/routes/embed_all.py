"""TEI ``POST /embed_all``: ``{"inputs": ...}`` -> per input its scored token vectors
``[[[float, ...], ...], ...]`` (a multi-vector model: ColBERT, BGE-M3's ColBERT vectors)."""

from __future__ import annotations

from typing import cast

from fastapi import APIRouter, Request, Response

from server.app_state import get_state
from server.observability.access_log import record_usage
from server.protocols.tei import EmbedAllRequest
from server.responses import streamed_json_array
from server.routes import held_engine
from server.served_models.model_registry import EMBED
from wde.entrypoints.task_options import EncodeOptions
from wde.outputs import MultiVectorOutput

router = APIRouter(tags=["TEI"])


@router.post("/embed_all", response_model=list[list[list[float]]])
async def embed_all(body: EmbedAllRequest, request: Request) -> Response:
    state = get_state(request)
    # 1. limits
    state.check_num_inputs(len(body.inputs), "inputs")
    # 2. the engine (bad input raises: 422 / 400; a model without token vectors: 400 naming its outputs)
    options = EncodeOptions(
        truncate=body.truncate,
        prompt_name=body.prompt_name,
        output="multi_vector",
        input_type=body.input_type,
        truncation_direction=body.truncation_direction,
    )
    async with state.models.use(body.model, EMBED) as model:
        outputs = cast(list[MultiVectorOutput], await held_engine(model).encode(body.inputs, **options))
    record_usage(request.state, len(outputs), sum(output.num_tokens for output in outputs))
    # 3. TEI's shape, streamed an input at a time: its [num_vectors, size] float32 array straight to orjson
    return streamed_json_array([output.vectors for output in outputs])
