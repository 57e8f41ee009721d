"""Text Embeddings Inference's request and response bodies (``/embed``, ``/rerank``, ``/predict``,
``/tokenize``, ``/info``, ...), with wde's own options.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    Field,
    PlainValidator,
    StrictBool,
    StrictStr,
    field_validator,
)
from pydantic_core import PydanticCustomError

from server.protocols.common import (
    CHUNK_SCORE_HELP,
    INPUT_TYPE_HELP,
    LONG_INPUT_HELP,
    MODEL_HELP,
    PRECISION_HELP,
    ChunkScore,
    Dimensions,
    Inputs,
    InputType,
    LongInput,
    ModelName,
    PositiveInt,
    Precision,
    RequestModel,
    TokenIds,
    TruncationDirection,
    integral_token_ids,
    is_token_id,
    parse_inputs,
)


class TEIRequestModel(RequestModel):
    """A TEI route's body: TEI's fields, plus the optional ``model`` of a multi-model wde server."""

    model: ModelName = Field(None, description=MODEL_HELP)


class EmbedRequest(TEIRequestModel):
    inputs: Inputs
    normalize: StrictBool = True
    truncate: StrictBool | None = Field(None, description="null: the server's --truncate default")
    truncation_direction: TruncationDirection = "right"
    prompt_name: str | None = None
    dimensions: Dimensions | None = None
    precision: Precision = Field("float32", description=PRECISION_HELP)
    long_input: LongInput | None = Field(None, description=LONG_INPUT_HELP)


class EmbedSparseRequest(TEIRequestModel):
    """TEI ``POST /embed_sparse``: SPLADE vocabulary weights per input (``max_active_dims`` is wde's: keep the
    largest weights only, as sentence-transformers' SparseEncoder.encode does)."""

    inputs: Inputs
    truncate: StrictBool | None = Field(None, description="null: the server's --truncate default")
    truncation_direction: TruncationDirection = "right"
    prompt_name: str | None = None
    max_active_dims: PositiveInt | None = Field(
        None, description="keep each input's N largest weights (null: the model's max_active_dims, else all)"
    )


class EmbedAllRequest(TEIRequestModel):
    """TEI ``POST /embed_all``: every scored token's vector per input (a multi-vector model: ColBERT,
    BGE-M3). ``input_type`` is wde's: a late-interaction model's query or document side."""

    inputs: Inputs
    truncate: StrictBool | None = Field(None, description="null: the server's --truncate default")
    truncation_direction: TruncationDirection = "right"
    prompt_name: str | None = None
    input_type: InputType | None = Field(None, description=INPUT_TYPE_HELP)


class SparseValue(BaseModel):
    index: int  # token id
    value: float  # its weight (> 0)


def _decode_ids(value: Any) -> list[list[int]]:
    """TEI's ``ids``: one list of token ids, or a list of such lists."""
    if isinstance(value, list) and value and all(is_token_id(item) for item in value):
        value = [value]
    if not isinstance(value, list) or not value:
        raise PydanticCustomError(
            "decode_ids", "expected token ids: a list of int, or a list of lists of int"
        )
    sequences: list[list[int]] = []
    for index, item in enumerate(value):
        if not isinstance(item, list) or not item or not all(is_token_id(token) for token in item):
            raise PydanticCustomError(
                "decode_ids", "item {index} must be a non-empty list of int token ids", {"index": index}
            )
        ids = integral_token_ids(item)
        if min(ids) < 0:
            raise PydanticCustomError("decode_ids", "item {index} has a negative token id", {"index": index})
        sequences.append(ids)
    return sequences


class TokenizeRequest(TEIRequestModel):
    inputs: Annotated[
        list[Any],
        PlainValidator(parse_inputs, json_schema_input_type=str | Annotated[list[str], Field(min_length=1)]),
    ]
    add_special_tokens: StrictBool = True
    prompt_name: str | None = None

    @field_validator("inputs")
    @classmethod
    def _texts_only(cls, value: list[Any]) -> list[Any]:
        for index, item in enumerate(value):
            if not isinstance(item, str):
                raise ValueError(f"item {index} is a list of token ids; /tokenize takes texts")
        return value


class DecodeRequest(TEIRequestModel):
    """TEI ``POST /decode``: token ids back to text (one list of ids, or several)."""

    ids: Annotated[
        list[Any],
        PlainValidator(
            _decode_ids, json_schema_input_type=TokenIds | Annotated[list[TokenIds], Field(min_length=1)]
        ),
    ]
    skip_special_tokens: StrictBool = True


class SimilarityInput(RequestModel):
    source_sentence: StrictStr
    sentences: Annotated[list[StrictStr], Field(min_length=1)]


class SimilarityParameters(RequestModel):
    truncate: StrictBool | None = Field(None, description="null: the server's --truncate default")
    truncation_direction: TruncationDirection = "right"
    prompt_name: str | None = None


class SimilarityRequest(TEIRequestModel):
    """TEI ``POST /similarity`` (the Hub's sentence-similarity task): the cosine similarity of
    ``source_sentence`` to each of ``sentences``."""

    inputs: SimilarityInput
    parameters: SimilarityParameters | None = None


INSTRUCTION_HELP = (
    "LLM rerankers (Qwen3-Reranker): the task instruction of the prompt template (default: the server's "
    "--score-instruction, else the model card's); other models refuse it"
)


class RerankRequest(TEIRequestModel):
    """TEI ``POST /rerank`` with ``texts`` (a body with ``documents`` is a ``CohereRerankRequest``)."""

    query: StrictStr
    texts: Annotated[list[StrictStr], Field(min_length=1)]
    truncate: StrictBool | None = Field(None, description="null: the server's --truncate default")
    truncation_direction: TruncationDirection = "right"
    raw_scores: StrictBool = False
    return_text: StrictBool = False
    instruction: StrictStr | None = Field(None, description=INSTRUCTION_HELP)
    long_input: LongInput | None = Field(None, description=LONG_INPUT_HELP)
    chunk_score: ChunkScore | None = Field(None, description=CHUNK_SCORE_HELP)


PredictInputSchema = (
    str
    | Annotated[list[str], Field(min_length=1)]
    | Annotated[list[Annotated[list[str], Field(min_length=1, max_length=2)]], Field(min_length=1)]
)


def parse_predict_inputs(value: Any) -> tuple[list[str | tuple[str, str]], bool]:
    """TEI's predict inputs -> (texts or pairs, whether it was a batch), read as TEI reads them: ``"a"`` and
    ``["a", "b"]`` (two strings: a pair) are one input; ``["a", "b", "c"]`` is a batch of three texts; a list
    of lists (``[["a"], ["a", "b"]]``) is a batch of texts and pairs."""
    if isinstance(value, str):
        return [value], False
    if not isinstance(value, list) or not value:
        raise PydanticCustomError(
            "predict_inputs", "expected a str, a [text, text] pair, or a list of [text] / [text, text] lists"
        )
    if all(isinstance(item, str) for item in value):
        if len(value) == 2:
            return [(value[0], value[1])], False
        return list(value), True
    sequences: list[str | tuple[str, str]] = []
    for index, item in enumerate(value):
        if not isinstance(item, list) or len(item) not in (1, 2) or not all(isinstance(x, str) for x in item):
            raise PydanticCustomError(
                "predict_inputs", "item {index} must be [text] or [text_1, text_2]", {"index": index}
            )
        sequences.append(item[0] if len(item) == 1 else (item[0], item[1]))
    return sequences, True


class PredictRequest(TEIRequestModel):
    """TEI ``POST /predict``: a classifier's label scores for texts or text pairs."""

    inputs: Annotated[
        tuple[list[Any], bool],
        PlainValidator(parse_predict_inputs, json_schema_input_type=PredictInputSchema),
    ]
    raw_scores: StrictBool = False
    truncate: StrictBool | None = Field(None, description="null: the server's --truncate default")
    truncation_direction: TruncationDirection = "right"


class Prediction(BaseModel):
    score: float
    label: str


class Rank(BaseModel):
    index: int
    score: float
    text: str | None = None


class SimpleToken(BaseModel):
    id: int
    text: str
    special: bool
    start: int | None  # character offsets into the input (with the prompt prepended); null for specials
    stop: int | None


class EmbeddingModelType(BaseModel):
    pooling: str  # TEI's names: cls, mean, max, last_token, or splade (a SPLADE model: sparse output)


class ClassifierModelType(BaseModel):
    id2label: dict[str, str]
    label2id: dict[str, int]


class ModelType(BaseModel):
    """Exactly one key: embedding, reranker (one label) or classifier (several labels)."""

    embedding: EmbeddingModelType | None = None
    reranker: ClassifierModelType | None = None
    classifier: ClassifierModelType | None = None


class ResultCacheInfo(BaseModel):
    size_mib: float  # --cache-size (0: off)
    max_bytes: int
    deduplicate: bool  # identical inputs of one request run once


class CalibrationInfo(BaseModel):
    """The texts whose embeddings give int8 / uint8 outputs their ranges."""

    source: str  # "bundled" (wde's sentences: wde/calibration/README.md), or --calibration-file's path
    num_texts: int | None  # null for a model not loaded now (--max-loaded-models)


class InfoResponse(BaseModel):
    model_id: str
    served_model_name: str
    model_sha: str | None = None
    model_dtype: str
    quantization: str | None = None  # "int8" when served with --quantization int8 (not in TEI's /info)
    model_type: ModelType
    model_architecture: str  # config.json's architecture that wde serves it as (not in TEI's /info)
    outputs: list[str]  # an embedding model's output kinds ("dense", "sparse"), default first (not in TEI's)
    max_concurrent_requests: int
    max_input_length: int
    max_batch_tokens: int  # "auto": max_input_length until the model is loaded and the budget sized
    max_batch_requests: int
    max_client_batch_size: int
    auto_truncate: bool
    tokenization_workers: int  # 1: the engine thread tokenizes each window in one batched call
    version: str
    sha: str | None = None
    docker_label: str | None = None
    attention_backend: str | None  # null for a model not loaded now (--max-loaded-models)
    device: str
    executor: str
    result_cache: ResultCacheInfo
    calibration: CalibrationInfo | None = None  # null for a model without dense output (wde's)
    loaded: bool  # its engine is loaded and ready (wde's)
    num_loads: int  # engines made for it: 1, more when --max-loaded-models reloaded it (wde's)
    models: list[InfoResponse] | None = None  # a multi-model server: every model (wde's)


class HealthResponse(BaseModel):
    status: Literal["ready"]


class TEIErrorResponse(BaseModel):
    error: str
    error_type: str
