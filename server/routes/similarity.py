"""TEI ``POST /similarity`` (the Hub's sentence-similarity task): ``{"inputs": {"source_sentence",
"sentences"}}`` -> the cosine similarity of the source sentence to each sentence, in order."""

from __future__ import annotations

from typing import cast

import numpy as np
from fastapi import APIRouter, Request

from server.app_state import get_state
from server.observability.access_log import record_usage
from server.protocols.tei import SimilarityParameters, SimilarityRequest
from server.responses import ORJSONResponse
from server.routes import held_engine
from server.served_models.model_registry import EMBED
from wde.entrypoints.task_options import EncodeOptions
from wde.outputs import EmbeddingOutput

router = APIRouter(tags=["TEI"])


@router.post("/similarity", response_model=list[float], response_class=ORJSONResponse)
async def similarity(body: SimilarityRequest, request: Request) -> ORJSONResponse:
    state = get_state(request)
    # 1. limits
    sentences = body.inputs.sentences
    state.check_num_inputs(len(sentences), "inputs.sentences")
    # 2. the engine: the source and every sentence embedded in one call, normalized
    parameters = body.parameters or SimilarityParameters.model_validate({})
    options = EncodeOptions(
        normalize=True,
        truncate=parameters.truncate,
        prompt_name=parameters.prompt_name,
        output="dense",
        truncation_direction=parameters.truncation_direction,
    )
    async with state.models.use(body.model, EMBED) as model:
        outputs = await held_engine(model).encode([body.inputs.source_sentence, *sentences], **options)
    record_usage(request.state, len(outputs), sum(output.num_tokens for output in outputs))
    # 3. cosine similarities: dot products of unit vectors
    vectors = cast(list[EmbeddingOutput], outputs)  # output "dense"
    source = vectors[0].embedding  # [hidden_size]
    others = np.stack([output.embedding for output in vectors[1:]])  # [num_sentences, hidden_size]
    return ORJSONResponse((others @ source).tolist())
