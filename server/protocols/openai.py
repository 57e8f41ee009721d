"""OpenAI's request and response bodies: ``/v1/embeddings``, ``/v1/models`` and the error shape."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    Field,
)

from server.protocols.common import (
    INPUT_TYPE_HELP,
    LONG_INPUT_HELP,
    PRECISION_HELP,
    Dimensions,
    Inputs,
    InputType,
    LongInput,
    ModelName,
    OutputKind,
    PositiveInt,
    Precision,
    RequestModel,
)


class EmbeddingRequest(RequestModel):
    input: Inputs
    model: ModelName = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Dimensions | None = None
    user: str | None = None  # accepted and ignored, as OpenAI clients send it
    # wde's: the output kind(s) of each embedding (README "Sparse and multi-vector output")
    output: OutputKind | Annotated[list[OutputKind], Field(min_length=1)] = Field(
        "dense",
        description="dense (OpenAI's vector), sparse ({indices, values}), multi_vector (one vector per "
        "token), or a list of them: then each embedding is {kind: value}",
    )
    input_type: InputType | None = Field(None, description=INPUT_TYPE_HELP)
    max_active_dims: PositiveInt | None = Field(None, description="sparse output: keep the N largest weights")
    precision: Precision = Field("float32", description=PRECISION_HELP)
    long_input: LongInput | None = Field(None, description=LONG_INPUT_HELP)
    task: str | None = Field(
        None,
        description="a model with task adapters (Jina v3: retrieval.query, retrieval.passage, separation, "
        "classification, text-matching), as Jina's embeddings API takes it: that task's adapter and prompt",
    )


class SparseEmbedding(BaseModel):
    """A sparse embedding: token ids ascending and their weights (base64: little-endian int32 / float32)."""

    indices: list[int] | str
    values: list[float] | str


class MultiVectorEmbedding(BaseModel):
    """Token vectors in base64: little-endian float32, row-major ``shape`` [num_vectors, size]."""

    data: str
    shape: list[int]


KindEmbedding = list[float] | list[int] | str | SparseEmbedding | list[list[float]] | MultiVectorEmbedding


class EmbeddingData(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    # a kind's value (dense: floats, or base64 of little-endian float32; ints, or base64 of the bytes, when
    # quantized), or {kind: value} for several
    embedding: KindEmbedding | dict[str, KindEmbedding]


class Usage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[EmbeddingData]
    model: str
    usage: Usage


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "wde"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class OpenAIError(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class OpenAIErrorResponse(BaseModel):
    error: OpenAIError
