"""vLLM's ``POST /pooling``: each input's pooled output in vLLM's shape, by ``task``: ``embed`` (the
embedding, as ``/v1/embeddings``), ``classify`` (label probabilities, as ``/classify``) or ``token_embed``
(a late-interaction model's token vectors, as ``/embed_all``); unset: the model's own (embed for an
embedding model, classify for a cross-encoder or classifier)."""

from __future__ import annotations

import base64
import time
import uuid
from typing import Any, cast

import numpy as np
from fastapi import APIRouter, Request

from server.app_state import get_state
from server.errors import UnpairedFieldsError
from server.observability.access_log import record_usage
from server.protocols.common import truncation_of
from server.protocols.vllm import PoolingRequest, PoolingResponse
from server.responses import ORJSONResponse
from server.routes import held_engine
from server.routes.predict import label_scores
from server.routes.score import vllm_usage
from wde.entrypoints.task_options import EncodeOptions
from wde.outputs import EmbeddingOutput, MultiVectorOutput

router = APIRouter(tags=["vLLM"])


@router.post("/pooling", response_model=PoolingResponse, response_class=ORJSONResponse)
async def pooling(body: PoolingRequest, request: Request) -> ORJSONResponse:
    state = get_state(request)
    # 1. limits
    state.check_num_inputs(len(body.input), "input")
    # 2. the engine: the task asked, else the model's own (a model of the other task answers 400)
    truncate, max_input_tokens = truncation_of(body.truncate_prompt_tokens)
    async with state.models.use(body.model) as model:
        engine = held_engine(model)
        task = body.task or ("classify" if engine.info.model_config.task == "score" else "embed")
        values: list[np.ndarray]
        if task == "classify":
            if body.dimensions is not None:
                raise UnpairedFieldsError("dimensions applies to task embed, not to classify")
            outputs: list[Any] = await engine.classify(
                body.input,
                truncate=truncate,
                raw_scores=True,
                truncation_direction=body.truncation_side,
                max_input_tokens=max_input_tokens,
            )
            values = [label_scores(output.scores, body.use_activation is False) for output in outputs]
        else:
            dense = task == "embed"
            options = EncodeOptions(
                normalize=body.use_activation if dense else None,
                dimensions=body.dimensions,
                truncate=truncate,
                output="dense" if dense else "multi_vector",
                truncation_direction=body.truncation_side,
                max_input_tokens=max_input_tokens,
            )
            outputs = await engine.encode(body.input, **options)
            if dense:
                values = [output.embedding for output in cast(list[EmbeddingOutput], outputs)]
            else:
                values = [output.vectors for output in cast(list[MultiVectorOutput], outputs)]
    num_tokens = sum(output.num_tokens for output in outputs)
    record_usage(request.state, len(outputs), num_tokens)
    # 3. vLLM's shape: floats, or base64 of little-endian float32
    data = [
        {"index": index, "object": "pooling", "data": _encoded(value, body.encoding_format)}
        for index, value in enumerate(values)
    ]
    return ORJSONResponse(
        {
            "id": f"pool-{uuid.uuid4().hex}",
            "object": "list",
            "created": int(time.time()),
            "model": model.name,
            "data": data,
            "usage": vllm_usage(num_tokens),
        }
    )


def _encoded(value: np.ndarray, encoding_format: str) -> Any:
    if encoding_format == "base64":
        return base64.b64encode(np.ascontiguousarray(value, dtype="<f4").tobytes()).decode("ascii")
    return value
