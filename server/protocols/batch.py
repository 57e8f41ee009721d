"""Request and response bodies of ``/v1/files`` and ``/v1/batches``: OpenAI's file and batch objects."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, StrictStr, field_validator

from server.protocols.common import RequestModel

MAX_METADATA_KEYS = 16
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 512


class CreateBatchRequest(RequestModel):
    input_file_id: StrictStr = Field(description="a file uploaded with purpose 'batch' (POST /v1/files)")
    endpoint: Literal["/v1/embeddings", "/v1/rerank"] = Field(description="the route every line is sent to")
    completion_window: Literal["24h"]
    metadata: dict[StrictStr, StrictStr] | None = Field(
        None,
        json_schema_extra={  # the limits _metadata_limits enforces, published for clients and schema tests
            "maxProperties": MAX_METADATA_KEYS,
            "propertyNames": {"maxLength": MAX_METADATA_KEY_CHARS},
            "additionalProperties": {"type": "string", "maxLength": MAX_METADATA_VALUE_CHARS},
        },
    )
    output_expires_after: dict[str, Any] | None = Field(
        None, description="accepted for the SDK; output files are kept until deleted from --batch-dir"
    )

    @field_validator("metadata")
    @classmethod
    def _metadata_limits(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return value
        if len(value) > MAX_METADATA_KEYS:
            raise ValueError(f"has {len(value)} keys, more than {MAX_METADATA_KEYS}")
        for key, item in value.items():
            if len(key) > MAX_METADATA_KEY_CHARS or len(item) > MAX_METADATA_VALUE_CHARS:
                raise ValueError(
                    f"key {key[:20]!r}: keys are at most {MAX_METADATA_KEY_CHARS} characters, values at most "
                    f"{MAX_METADATA_VALUE_CHARS}"
                )
        return value


class FileObject(BaseModel):
    id: str
    object: Literal["file"]
    bytes: int
    created_at: int
    filename: str
    purpose: Literal["batch", "batch_output"]
    status: Literal["processed"]
    expires_at: int | None = None
    status_details: str | None = None


class FileList(BaseModel):
    object: Literal["list"]
    data: list[FileObject]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool


class RequestCounts(BaseModel):
    total: int
    completed: int
    failed: int


class BatchError(BaseModel):
    code: str | None = None
    message: str | None = None
    param: str | None = None
    line: int | None = None


class BatchErrors(BaseModel):
    object: Literal["list"]
    data: list[BatchError]


class BatchObject(BaseModel):
    id: str
    object: Literal["batch"]
    endpoint: str
    model: str | None = None
    errors: BatchErrors | None = None
    input_file_id: str
    completion_window: str
    status: Literal[
        "validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling", "cancelled"
    ]
    output_file_id: str | None = None
    error_file_id: str | None = None
    created_at: int
    in_progress_at: int | None = None
    expires_at: int | None = None
    finalizing_at: int | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    expired_at: int | None = None
    cancelling_at: int | None = None
    cancelled_at: int | None = None
    request_counts: RequestCounts
    usage: dict[str, Any] | None = None
    metadata: dict[str, str] | None = None


class BatchList(BaseModel):
    object: Literal["list"]
    data: list[BatchObject]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool


def page(data: list[dict[str, Any]], has_more: bool) -> dict[str, Any]:
    """OpenAI's cursor page of ``data`` (the SDK asks for the next one ``after`` its ``last_id``)."""
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": has_more,
    }
