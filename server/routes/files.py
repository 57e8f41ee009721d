"""OpenAI files for the Batch API: ``POST /v1/files`` (multipart JSONL upload, purpose "batch"),
``GET /v1/files``, ``GET /v1/files/{file_id}`` and ``GET /v1/files/{file_id}/content``."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import FileResponse, Response

from server.batches.error_answer import not_found
from server.batches.file_store import FileNotFound
from server.batches.multipart import FormError, FormField, parse_form
from server.batches.service import get_batches
from server.protocols.batch import FileList, FileObject, page
from server.protocols.openai import OpenAIErrorResponse
from server.responses import ORJSONResponse

router = APIRouter(prefix="/v1", tags=["Batch"])

NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": OpenAIErrorResponse, "description": "no file with this id"}
}
UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file", "purpose"],
                    "properties": {
                        "file": {
                            "type": "string",
                            "format": "binary",
                            "description": "JSONL, one request a line",
                        },
                        "purpose": {"type": "string", "enum": ["batch"]},
                    },
                }
            }
        },
    }
}
LISTING = "GET /v1/files"


@router.post(
    "/files",
    response_model=FileObject,
    response_class=ORJSONResponse,
    openapi_extra=UPLOAD_BODY,
    responses={
        422: {"model": OpenAIErrorResponse, "description": "not a form with a file and purpose 'batch'"}
    },
)
async def create_file(request: Request) -> ORJSONResponse:
    # 1. the form: a file part and purpose "batch" (the body was read within --payload-limit)
    body = await request.body()
    try:
        form = await asyncio.to_thread(parse_form, request.headers.get("content-type", ""), body)
    except FormError as e:
        raise ValueError(str(e)) from None
    upload = _checked_upload(form)
    # 2. stored whole (content, then its file object) before it is answered
    service = get_batches(request)
    file_object = await asyncio.to_thread(
        service.files.create, upload.filename or "upload.jsonl", "batch", upload.value
    )
    return ORJSONResponse(file_object)


@router.get("/files", response_model=FileList, response_class=ORJSONResponse)
async def list_files(request: Request) -> ORJSONResponse:
    files = await asyncio.to_thread(get_batches(request).files.list)
    return ORJSONResponse(page(files, has_more=False))


@router.get("/files/{file_id}", response_model=FileObject, response_class=ORJSONResponse, responses=NOT_FOUND)
async def retrieve_file(file_id: str, request: Request) -> Response:
    try:
        return ORJSONResponse(get_batches(request).files.get(file_id))
    except FileNotFound:
        return not_found("file", file_id, "file_id", LISTING)


@router.get(
    "/files/{file_id}/content",
    response_class=Response,
    responses={**NOT_FOUND, 200: {"content": {"application/octet-stream": {}}, "description": "the JSONL"}},
)
async def file_content(file_id: str, request: Request) -> Response:
    try:
        path = get_batches(request).files.content_path(file_id)
    except FileNotFound:
        return not_found("file", file_id, "file_id", LISTING)
    return FileResponse(path, media_type="application/octet-stream")


def _checked_upload(form: dict[str, FormField]) -> FormField:
    purpose = form.get("purpose")
    if purpose is None:
        raise ValueError("purpose: missing; send the form field purpose=batch")
    if purpose.value != b"batch":
        value = purpose.value.decode("utf-8", "replace")[:40]
        raise ValueError(f"purpose: {value!r} is not served here; this server takes purpose 'batch' only")
    upload = form.get("file")
    if upload is None:
        raise ValueError("file: missing; send the JSONL requests as the form's file part 'file'")
    return upload
