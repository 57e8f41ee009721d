"""TEI ``POST /predict``: a classifier's (or cross-encoder's) label scores for texts or text pairs.

As TEI: every label with its score, highest first; sigmoid for a one-label model, softmax over the labels
otherwise (``raw_scores``: the logits). One input answers a list of labels, a batch a list of such lists.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from fastapi import APIRouter, Request

from server.app_state import get_state
from server.observability.access_log import record_usage
from server.protocols.tei import Prediction, PredictRequest
from server.responses import ORJSONResponse
from server.routes import held_engine
from server.served_models.model_registry import SCORE

router = APIRouter(tags=["TEI"])


@router.post(
    "/predict", response_model=list[Prediction] | list[list[Prediction]], response_class=ORJSONResponse
)
async def predict(body: PredictRequest, request: Request) -> ORJSONResponse:
    state = get_state(request)
    inputs, is_batch = body.inputs
    # 1. limits
    state.check_num_inputs(len(inputs), "inputs")
    # 2. the engine: logits, activated here as TEI does
    async with state.models.use(body.model, SCORE) as model:
        outputs = await held_engine(model).classify(
            inputs, truncate=body.truncate, raw_scores=True, truncation_direction=body.truncation_direction
        )
        id2label = held_engine(model).info.model_config.hf_config.get("id2label") or {}
    record_usage(request.state, len(outputs), sum(output.num_tokens for output in outputs))
    predictions = [
        ranked_labels(label_scores(output.scores, body.raw_scores), id2label) for output in outputs
    ]
    # 3. TEI's shape
    return ORJSONResponse(predictions if is_batch else predictions[0])


def label_scores(logits: np.ndarray, raw_scores: bool = False) -> np.ndarray:
    """A classifier's logits [num_labels] activated as its head reads them: sigmoid for one label, softmax
    over several (``raw_scores``: the logits as they are)."""
    if raw_scores:
        return logits
    if logits.shape[0] == 1:
        return 1.0 / (1.0 + np.exp(-logits))
    shifted = np.exp(logits - logits.max())
    return shifted / shifted.sum()


def ranked_labels(scores: np.ndarray, id2label: dict[str, str]) -> list[dict[str, Any]]:
    """Every label with its score, highest first (ties in label order)."""
    order = np.argsort(-scores, kind="stable")
    return [{"score": float(scores[i]), "label": str(id2label.get(str(i), f"LABEL_{i}"))} for i in order]
