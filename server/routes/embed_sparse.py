"""TEI ``POST /embed_sparse``: ``{"inputs": ...}`` -> per input its non-zero vocabulary weights
``[{"index": token_id, "value": weight}, ...]`` in ascending token-id order (a SPLADE model)."""

from __future__ import annotations

from typing import cast

from fastapi import APIRouter, Request

from server.app_state import get_state
from server.observability.access_log import record_usage
from server.protocols.tei import EmbedSparseRequest, SparseValue
from server.responses import ORJSONResponse
from server.routes import held_engine
from server.served_models.model_registry import EMBED
from wde.entrypoints.task_options import EncodeOptions
from wde.outputs import SparseEmbeddingOutput

router = APIRouter(tags=["TEI"])


@router.post("/embed_sparse", response_model=list[list[SparseValue]], response_class=ORJSONResponse)
async def embed_sparse(body: EmbedSparseRequest, request: Request) -> ORJSONResponse:
    state = get_state(request)
    # 1. limits
    state.check_num_inputs(len(body.inputs), "inputs")
    # 2. the engine (bad input raises: 422 / 400; a model without sparse output: 400 naming its outputs)
    options = EncodeOptions(
        truncate=body.truncate,
        prompt_name=body.prompt_name,
        output="sparse",
        max_active_dims=body.max_active_dims,
        truncation_direction=body.truncation_direction,
    )
    async with state.models.use(body.model, EMBED) as model:
        outputs = cast(list[SparseEmbeddingOutput], await held_engine(model).encode(body.inputs, **options))
    record_usage(request.state, len(outputs), sum(output.num_tokens for output in outputs))
    # 3. TEI's shape
    return ORJSONResponse([sparse_values(output) for output in outputs])


def sparse_values(output: SparseEmbeddingOutput) -> list[dict[str, int | float]]:
    return [
        {"index": index, "value": value}
        for index, value in zip(output.indices.tolist(), output.values.tolist(), strict=True)
    ]
