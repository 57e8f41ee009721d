"""vLLM's ``POST /score`` and ``POST /v1/score``: ``text_1`` against ``text_2`` (1:1, 1:N, N:N), answered in
vLLM's shape. A cross-encoder's activated score per pair (``use_activation: false``: its logit), or an
embedding model's cosine similarity, as ``LLM.score``."""

from __future__ import annotations

import time
import uuid

from fastapi import APIRouter, Request

from server.app_state import get_state
from server.observability.access_log import record_usage
from server.protocols.common import truncation_of
from server.protocols.vllm import ScoreRequest, ScoreResponse
from server.responses import ORJSONResponse
from server.routes import held_engine
from server.served_models.model_registry import SCORE

router = APIRouter(tags=["vLLM"])


@router.post("/score", response_model=ScoreResponse, response_class=ORJSONResponse)
@router.post("/v1/score", response_model=ScoreResponse, response_class=ORJSONResponse)
async def score(body: ScoreRequest, request: Request) -> ORJSONResponse:
    state = get_state(request)
    # 1. the sides (1:1, 1:N, N:N) and the limits
    texts_1, texts_2 = body.sides()
    state.check_num_inputs(len(texts_2), "text_2")
    # 2. the engine: a cross-encoder first when the request names no model
    truncate, max_input_tokens = truncation_of(body.truncate_prompt_tokens)
    async with state.models.use(body.model, SCORE) as model:
        outputs = await held_engine(model).score(
            texts_1 if len(texts_1) > 1 else texts_1[0],
            texts_2,
            truncate=truncate,
            raw_scores=body.use_activation is False and model.task == SCORE,  # a bi-encoder: cosine
            instruction=body.instruction,
            truncation_direction=body.truncation_side,
            max_input_tokens=max_input_tokens,
        )
    num_tokens = sum(output.num_tokens for output in outputs)
    record_usage(request.state, len(outputs), num_tokens)
    # 3. vLLM's shape
    data = [
        {"index": index, "object": "score", "score": output.score} for index, output in enumerate(outputs)
    ]
    return ORJSONResponse(
        {
            "id": f"score-{uuid.uuid4().hex}",
            "object": "list",
            "created": int(time.time()),
            "model": model.name,
            "data": data,
            "usage": vllm_usage(num_tokens),
        }
    )


def vllm_usage(num_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": num_tokens, "total_tokens": num_tokens, "completion_tokens": 0}
