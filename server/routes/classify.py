"""``POST /classify``: vLLM's (``{"input"}`` -> per input its label, probabilities and number of classes)
and Infinity's (``{"input", "raw_scores"}`` -> per input every label's score, best first); ``/v1/classify``
is vLLM's. Infinity's clients always send ``raw_scores``: a body with it gets Infinity's shape.

Probabilities as the classifier's head reads them, as TEI's /predict: sigmoid for one label, softmax over
several (vLLM's ``use_activation: false`` / Infinity's ``raw_scores: true``: the logits).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from fastapi import APIRouter, Body, Request
from pydantic import TypeAdapter

from server.app_state import get_state
from server.observability.access_log import record_usage
from server.protocols.common import truncation_of
from server.protocols.infinity import InfinityClassifyRequest, InfinityClassifyResponse
from server.protocols.vllm import ClassificationRequest, ClassificationResponse
from server.responses import ORJSONResponse
from server.routes import held_engine
from server.routes.compat import validate_body
from server.routes.predict import label_scores, ranked_labels
from server.routes.score import vllm_usage
from server.served_models.model_registry import SCORE

router = APIRouter(tags=["vLLM", "Infinity"])

_VLLM = TypeAdapter(ClassificationRequest)
_INFINITY = TypeAdapter(InfinityClassifyRequest)
DESCRIPTION = (
    "vLLM's body (`input`, `truncate_prompt_tokens`, `use_activation`) answers vLLM's shape; Infinity's "
    "(`input`, `raw_scores`) answers Infinity's."
)


@router.post(
    "/classify",
    response_model=ClassificationResponse | InfinityClassifyResponse,
    response_class=ORJSONResponse,
    description=DESCRIPTION,
)
async def classify(request: Request, body: dict[str, Any] = Body(...)) -> ORJSONResponse:  # noqa: B008
    if "raw_scores" in body:
        return await infinity_classify(validate_body(_INFINITY, body), request)
    return await vllm_classify(validate_body(_VLLM, body), request)


@router.post("/v1/classify", response_model=ClassificationResponse, response_class=ORJSONResponse)
async def vllm_classify(body: ClassificationRequest, request: Request) -> ORJSONResponse:
    state = get_state(request)
    # 1. limits
    state.check_num_inputs(len(body.input), "input")
    # 2. the engine: logits, activated here
    truncate, max_input_tokens = truncation_of(body.truncate_prompt_tokens)
    async with state.models.use(body.model, SCORE) as model:
        outputs = await held_engine(model).classify(
            body.input,
            truncate=truncate,
            raw_scores=True,
            truncation_direction=body.truncation_side,
            max_input_tokens=max_input_tokens,
        )
        id2label = held_engine(model).info.model_config.hf_config.get("id2label") or {}
    num_tokens = sum(output.num_tokens for output in outputs)
    record_usage(request.state, len(outputs), num_tokens)
    # 3. vLLM's shape: the best label, every class's probability in label order
    data = []
    for index, output in enumerate(outputs):
        probs = label_scores(output.scores, raw_scores=body.use_activation is False)
        best = int(probs.argmax())
        label = str(id2label.get(str(best), f"LABEL_{best}"))
        data.append({"index": index, "label": label, "probs": probs.tolist(), "num_classes": len(probs)})
    return ORJSONResponse(
        {
            "id": f"classify-{uuid.uuid4().hex}",
            "object": "list",
            "created": int(time.time()),
            "model": model.name,
            "data": data,
            "usage": vllm_usage(num_tokens),
        }
    )


async def infinity_classify(body: InfinityClassifyRequest, request: Request) -> ORJSONResponse:
    state = get_state(request)
    state.check_num_inputs(len(body.input), "input")
    async with state.models.use(body.model, SCORE) as model:
        outputs = await held_engine(model).classify(body.input, raw_scores=True)
        id2label = held_engine(model).info.model_config.hf_config.get("id2label") or {}
    num_tokens = sum(output.num_tokens for output in outputs)
    record_usage(request.state, len(outputs), num_tokens)
    # Infinity's shape: per input every label with its score, best first (as TEI's /predict)
    data = [ranked_labels(label_scores(output.scores, body.raw_scores), id2label) for output in outputs]
    return ORJSONResponse(
        {
            "object": "classify",
            "id": f"classify-{uuid.uuid4().hex}",
            "created": int(time.time()),
            "model": model.name,
            "data": data,
            "usage": {"prompt_tokens": num_tokens, "total_tokens": num_tokens},
        }
    )
