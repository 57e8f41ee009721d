"""OpenAI-compatible ``POST /v1/embeddings`` and ``GET /v1/models``."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
from fastapi import APIRouter, Request, Response

from server.app_state import get_state
from server.json_body_route import JsonBodyRoute
from server.observability.access_log import record_usage
from server.protocols.openai import EmbeddingRequest, EmbeddingResponse, ModelList
from server.responses import ORJSONResponse, dumps, streamed_json_array
from server.routes import held_engine
from server.served_models.model_registry import EMBED
from wde.config import ModelConfig
from wde.entrypoints.task_options import EncodeOptions
from wde.outputs import CombinedEmbeddingOutput, EmbeddingOutput, MultiVectorOutput, SparseEmbeddingOutput

router = APIRouter(prefix="/v1", tags=["OpenAI"], route_class=JsonBodyRoute)


@router.post("/embeddings", response_model=EmbeddingResponse, response_class=ORJSONResponse)
async def create_embeddings(body: EmbeddingRequest, request: Request) -> Response:
    state = get_state(request)
    # 1. the limits
    state.check_num_inputs(len(body.input), "input")
    if any(isinstance(item, dict) for item in body.input):
        state.warn_token_ids_once()
    # 2. the engine (bad input raises: 422 / 400); normalization: the model's default, as LLM.encode
    options = EncodeOptions(
        dimensions=body.dimensions,
        output=body.output,
        input_type=body.input_type,
        max_active_dims=body.max_active_dims,
        precision=body.precision,
        long_input=body.long_input,
        prompt_name=body.task,  # a task is its adapter and its prompt, both named after it
    )
    async with state.models.use(body.model, EMBED) as model:  # 404 for a model not served
        engine = held_engine(model)
        if body.task is not None:
            check_task(body.task, engine.info.model_config)
        outputs = await engine.encode(body.input, **options)
    # 3. the response: each kind as floats, or base64 of little-endian float32 (int32 sparse ids)
    base64_format = body.encoding_format == "base64"
    num_tokens = sum(output.num_tokens for output in outputs)
    record_usage(request.state, len(outputs), num_tokens)
    data = [
        {"object": "embedding", "index": index, "embedding": embedding_value(output, base64_format)}
        for index, output in enumerate(outputs)
    ]
    usage = {"prompt_tokens": num_tokens, "total_tokens": num_tokens}
    kinds = [body.output] if isinstance(body.output, str) else body.output
    if "multi_vector" not in kinds:
        return ORJSONResponse({"object": "list", "data": data, "model": model.name, "usage": usage})
    # token vectors are large: the body is streamed an input at a time
    tail = dumps({"model": model.name, "usage": usage})
    return streamed_json_array(data, prefix=b'{"object":"list","data":', suffix=b"," + tail[1:])


@router.get("/models", response_model=ModelList, response_class=ORJSONResponse)
async def list_models(request: Request) -> ORJSONResponse:
    state = get_state(request)
    cards = [
        {"id": name, "object": "model", "created": state.created, "owned_by": "wde"}
        for name in state.models.names
    ]
    return ORJSONResponse({"object": "list", "data": cards})


def check_task(task: str, model_config: ModelConfig) -> None:
    """``task`` names one of the model's task adapters (ValueError naming the field: 422)."""
    adapters = model_config.task_adapters
    if adapters is None:
        raise ValueError(
            f"task {task!r}: this model has no task adapters (task is for models such as Jina v3); leave "
            "task out"
        )
    if task not in adapters.names:
        raise ValueError(f"task {task!r} is not a task of this model (known: {', '.join(adapters.names)})")


def embedding_value(
    output: EmbeddingOutput | SparseEmbeddingOutput | MultiVectorOutput | CombinedEmbeddingOutput,
    base64_format: bool,
) -> Any:
    """One input's ``embedding``: a dense vector (floats or base64), ``{"indices", "values"}`` (sparse),
    token vectors (``[[float]]``, or ``{"data", "shape"}`` in base64), or ``{kind: value}`` for several."""
    if isinstance(output, CombinedEmbeddingOutput):
        return {kind: embedding_value(part, base64_format) for kind, part in output.outputs.items()}
    if isinstance(output, SparseEmbeddingOutput):
        if base64_format:
            return {"indices": _base64(output.indices, "<i4"), "values": _base64(output.values, "<f4")}
        return {"indices": output.indices, "values": output.values}
    if isinstance(output, MultiVectorOutput):
        if base64_format:
            return {"data": _base64(output.vectors, "<f4"), "shape": list(output.vectors.shape)}
        return output.vectors
    if base64_format:  # float32 little-endian, or the quantized bytes as they are
        return _base64(
            output.embedding, "<f4" if output.embedding.dtype == np.float32 else output.embedding.dtype
        )
    return output.embedding


def _base64(array: np.ndarray, dtype: str | np.dtype) -> str:
    return base64.b64encode(np.ascontiguousarray(array, dtype=dtype).tobytes()).decode("ascii")
