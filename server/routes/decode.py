"""TEI ``POST /decode``: token ids back to text, one string per list of ids (``skip_special_tokens``, as
the tokenizer's ``decode``)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from server.app_state import get_state
from server.protocols.tei import DecodeRequest
from server.responses import ORJSONResponse
from server.routes import held_engine

router = APIRouter(tags=["TEI"])


@router.post("/decode", response_model=list[str], response_class=ORJSONResponse)
async def decode(body: DecodeRequest, request: Request) -> ORJSONResponse:
    state = get_state(request)
    # 1. limits: the number of sequences, and ids inside the vocabulary
    state.check_num_inputs(len(body.ids), "ids")
    async with state.models.use(body.model) as model:
        tokenizer = held_engine(model).info.tokenizer
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    for index, ids in enumerate(body.ids):
        largest = max(ids)
        if largest >= vocab_size:
            raise ValueError(f"ids[{index}]: token id {largest} is outside the vocabulary [0, {vocab_size})")
    # 2. the tokenizer, off the event loop (a large request takes a while)
    texts = await run_in_threadpool(
        tokenizer.decode_batch, body.ids, skip_special_tokens=body.skip_special_tokens
    )
    return ORJSONResponse(texts)
