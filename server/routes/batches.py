"""The OpenAI Batch API for embeddings and rerank: ``POST /v1/batches``, ``GET /v1/batches``,
``GET /v1/batches/{batch_id}`` and ``POST /v1/batches/{batch_id}/cancel`` (see ``server/batches``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from server.app_state import get_state
from server.batches.batch_store import BatchNotFound
from server.batches.error_answer import error_answer, not_found
from server.batches.file_store import FileNotFound
from server.batches.service import BatchConflictError, get_batches
from server.protocols.batch import BatchList, BatchObject, CreateBatchRequest, page
from server.protocols.openai import OpenAIErrorResponse
from server.responses import ORJSONResponse

router = APIRouter(prefix="/v1", tags=["Batch"])

LISTING = "GET /v1/batches"
MAX_LIST_LIMIT = 100


def _responses(*statuses: int) -> dict[int | str, dict[str, object]]:
    descriptions = {
        404: "no batch (or input file) with this id",
        409: "the batch is finished: nothing to cancel",
    }
    return {
        status: {"model": OpenAIErrorResponse, "description": descriptions[status]} for status in statuses
    }


@router.post("/batches", response_model=BatchObject, response_class=ORJSONResponse, responses=_responses(404))
async def create_batch(body: CreateBatchRequest, request: Request) -> Response:
    model = get_state(request).served_model_name
    try:
        batch = await get_batches(request).create_batch(
            body.input_file_id, body.endpoint, body.completion_window, body.metadata, model
        )
    except FileNotFound:
        return not_found("file", body.input_file_id, "input_file_id", "GET /v1/files")
    return ORJSONResponse(batch)


@router.get("/batches", response_model=BatchList, response_class=ORJSONResponse)
async def list_batches(
    request: Request,
    after: Annotated[str | None, Query(description="the last id of the previous page")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIST_LIMIT)] = 20,
) -> ORJSONResponse:
    batches = get_batches(request).batches.list()  # newest first
    if after is not None:
        ids = [batch["id"] for batch in batches]
        batches = batches[ids.index(after) + 1 :] if after in ids else []
    return ORJSONResponse(page(batches[:limit], has_more=len(batches) > limit))


@router.get(
    "/batches/{batch_id}",
    response_model=BatchObject,
    response_class=ORJSONResponse,
    responses=_responses(404),
)
async def retrieve_batch(batch_id: str, request: Request) -> Response:
    try:
        return ORJSONResponse(get_batches(request).batches.get(batch_id))
    except BatchNotFound:
        return not_found("batch", batch_id, "batch_id", LISTING)


@router.post(
    "/batches/{batch_id}/cancel",
    response_model=BatchObject,
    response_class=ORJSONResponse,
    responses=_responses(404, 409),
)
async def cancel_batch(batch_id: str, request: Request) -> Response:
    try:
        return ORJSONResponse(await get_batches(request).cancel_batch(batch_id))
    except BatchNotFound:
        return not_found("batch", batch_id, "batch_id", LISTING)
    except BatchConflictError as e:
        return error_answer(409, str(e), "batch_id", "batch_not_cancellable")
