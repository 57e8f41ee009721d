"""Request and response bodies of the HTTP API (pydantic v2), TEI- and OpenAI-compatible.

Requests ignore unknown fields, as TEI and vLLM do (clients send fields of other servers), naming them in
the ``x-wde-ignored-fields`` response header; ``--strict-request-fields`` refuses them with 422
(``server/ignored_fields.py``). Fields that clients send and we do not use (OpenAI's ``user``) are declared
explicitly. Responses are built as plain dicts / numpy arrays and serialized with orjson; the response
models here document the shapes (OpenAPI) and are not used to validate what we send. vLLM's and Infinity's
own bodies are in ``server/vllm_protocol.py`` and ``server/infinity_protocol.py``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PlainValidator,
    StrictBool,
    StrictInt,
    StrictStr,
    Tag,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from server.ignored_fields import report_unknown_fields

# What an ``inputs`` / ``input`` field accepts: one text, texts, one token-id list, or token-id lists (the
# model's limits, such as the vocabulary size, are added to /openapi.json by server/openapi.py).
TokenIds = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]
InputsSchema = str | Annotated[list[str | TokenIds], Field(min_length=1)] | TokenIds


def parse_inputs(value: Any) -> list[str | dict[str, list[int]]]:
    """One engine prompt per input: a text stays a str, a token-id list becomes ``{"prompt_token_ids"}``.
    The engine checks the ids themselves (ints, inside the vocabulary, length)."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise PydanticCustomError(
            "inputs_type",
            "expected a str, a list of str, or token ids (a list of int, or a list of lists of int); "
            "got {type}",
            {"type": type(value).__name__},
        )
    if not value:
        raise PydanticCustomError("inputs_empty", "is an empty list; pass at least one input")
    if all(_is_token_id(item) for item in value):
        return [{"prompt_token_ids": _token_ids(value)}]
    prompts: list[str | dict[str, list[int]]] = []
    for index, item in enumerate(value):
        if isinstance(item, str):
            prompts.append(item)
        elif isinstance(item, list):
            prompts.append({"prompt_token_ids": _token_ids(item)})
        else:
            raise PydanticCustomError(
                "inputs_item_type",
                "item {index} is {type}; each input is a str or a list of int token ids",
                {"index": index, "type": "null" if item is None else type(item).__name__},
            )
    return prompts


def _is_token_id(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, float) and value.is_integer()
    )


def _token_ids(values: list[Any]) -> list[Any]:
    """JSON has one number type: 101.0 is the integer 101 (as JSON Schema's "integer" says); other values
    are kept for the engine to refuse by position."""
    return [int(value) if isinstance(value, float) and value.is_integer() else value for value in values]


Inputs = Annotated[list[Any], PlainValidator(parse_inputs, json_schema_input_type=InputsSchema)]


def _integral_float_to_int(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


# A positive integer as JSON has it: 3 or 3.0 (one number type; JSON Schema's "integer"), never "3" or true.
PositiveInt = Annotated[StrictInt, Field(ge=1), BeforeValidator(_integral_float_to_int)]
Dimensions = Annotated[PositiveInt, Field(description="keep the first N dimensions (Matryoshka)")]


def _minus_one_or_positive(value: int) -> int:
    if value == 0 or value < -1:
        raise ValueError(f"must be -1 (max_model_len) or a positive number of tokens, got {value}")
    return value


# vLLM's truncate_prompt_tokens: -1 cuts at max_model_len, N >= 1 keeps N tokens (special tokens included).
TruncatePromptTokens = Annotated[
    StrictInt,
    BeforeValidator(_integral_float_to_int),
    AfterValidator(_minus_one_or_positive),
    WithJsonSchema({"anyOf": [{"type": "integer", "const": -1}, {"type": "integer", "minimum": 1}]}),
]
TRUNCATE_PROMPT_TOKENS_HELP = (
    "vLLM's: cut each input to N tokens (special tokens included; -1: max_model_len; at most max_model_len); "
    "null: the server's --truncate default"
)


def truncation_of(truncate_prompt_tokens: int | None) -> tuple[bool | None, int | None]:
    """vLLM's ``truncate_prompt_tokens`` as wde's (truncate, max_input_tokens)."""
    if truncate_prompt_tokens is None:
        return None, None
    return True, None if truncate_prompt_tokens == -1 else truncate_prompt_tokens


OutputKind = Literal["dense", "sparse", "multi_vector"]
LongInput = Literal["truncate", "error", "chunk"]
LONG_INPUT_HELP = (
    "an input over max_model_len: truncate, error, or chunk (embedded / scored in windows and aggregated; "
    "README 'Long inputs'); null: from truncate, else the server's --long-input"
)
ChunkScore = Literal["max", "mean", "first"]
CHUNK_SCORE_HELP = "with long_input chunk: a document's score from its windows' scores (null: max)"
Precision = Literal["float32", "int8", "uint8", "binary", "ubinary"]
PRECISION_HELP = (
    "quantized vectors, as sentence-transformers' quantize_embeddings: int8 / uint8 (ranges from the "
    "server's --calibration-file, else from wde's bundled sentences; GET /info says which), binary / "
    "ubinary (sign bits packed 8 per byte)"
)
InputType = Literal["query", "document"]
INPUT_TYPE_HELP = "a late-interaction (ColBERT) model encodes a query or a document (the default) side"


class RequestModel(BaseModel):
    """A request body: unknown fields are ignored and reported (refused under --strict-request-fields)."""

    model_config = ConfigDict(extra="allow")

    @model_validator(mode="after")
    def _report_unknown_fields(self) -> RequestModel:
        if self.model_extra:
            report_unknown_fields(type(self).__name__, self.model_extra)
        return self


# Infinity's clients name no model with this (its default); it means the route's default model here too.
INFINITY_DEFAULT_MODEL = "default/not-specified"


def _default_model_as_none(value: Any) -> Any:
    return None if value == INFINITY_DEFAULT_MODEL else value


ModelName = Annotated[str | None, BeforeValidator(_default_model_as_none)]


MODEL_HELP = (
    "wde: the served model to use (GET /v1/models); null: the first served model of the route's kind "
    "(an embedding model for the embedding routes, a cross-encoder for /rerank and /predict)"
)


class TEIRequestModel(RequestModel):
    """A TEI route's body: TEI's fields, plus the optional ``model`` of a multi-model wde server."""

    model: ModelName = Field(None, description=MODEL_HELP)


# TEI's names ("Left" / "Right") and vLLM's ("left" / "right"), read as wde's lower-case ones: "right" cuts
# the end of an over-long input, "left" its start (the end is kept).
TruncationDirection = Annotated[
    Literal["right", "Right", "left", "Left"],
    AfterValidator(str.lower),
    WithJsonSchema(
        {
            "type": "string",
            "enum": ["right", "Right", "left", "Left"],
            "default": "right",
            "description": "an over-long input loses its end (right) or its start (left: the end is kept)",
        }
    ),
]


# ---- TEI ----------------------------------------------------------------------------------------------
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
    if isinstance(value, list) and value and all(_is_token_id(item) for item in value):
        value = [value]
    if not isinstance(value, list) or not value:
        raise PydanticCustomError(
            "decode_ids", "expected token ids: a list of int, or a list of lists of int"
        )
    sequences: list[list[int]] = []
    for index, item in enumerate(value):
        if not isinstance(item, list) or not item or not all(_is_token_id(token) for token in item):
            raise PydanticCustomError(
                "decode_ids", "item {index} must be a non-empty list of int token ids", {"index": index}
            )
        ids = _token_ids(item)
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


# ---- OpenAI -------------------------------------------------------------------------------------------
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


# ---- Cohere / Jina ------------------------------------------------------------------------------------
class CohereRerankRequest(RequestModel):
    """``POST /v1/rerank`` and ``/v2/rerank`` (Cohere; Jina, vLLM and Infinity clients send the same fields,
    and some of their own: ``raw_scores``, vLLM's truncation options)."""

    model: ModelName = None
    query: StrictStr
    documents: Annotated[list[StrictStr | dict[str, StrictStr]], Field(min_length=1)]
    top_n: PositiveInt | None = None
    return_documents: StrictBool = False
    rank_fields: Annotated[list[StrictStr], Field(min_length=1)] | None = None
    # Cohere's per-document token cap (cohere-haystack sends 4096): each document is cut to this many
    # tokens before it is paired with the query; the pair is still cut at max_model_len.
    max_tokens_per_doc: PositiveInt | None = None
    # Cohere v1's cap on chunks per document: not taken (long_input "chunk" scores every window); only null.
    max_chunks_per_doc: None = None
    instruction: StrictStr | None = Field(None, description=INSTRUCTION_HELP)
    long_input: LongInput | None = Field(None, description=LONG_INPUT_HELP)
    chunk_score: ChunkScore | None = Field(None, description=CHUNK_SCORE_HELP)
    raw_scores: StrictBool = Field(
        False, description="a cross-encoder's logits instead of scores (TEI, Infinity)"
    )
    truncate_prompt_tokens: TruncatePromptTokens | None = Field(None, description=TRUNCATE_PROMPT_TOKENS_HELP)
    truncation_side: TruncationDirection = "right"

    @model_validator(mode="after")
    def _documents_have_text(self) -> CohereRerankRequest:
        if self.model_extra and "texts" in self.model_extra:
            raise ValueError("texts: send TEI's texts or Cohere's documents, not both")
        if self.rank_fields is not None:
            return self
        for index, document in enumerate(self.documents):
            if isinstance(document, dict) and not isinstance(document.get("text"), str):
                raise ValueError(
                    f"documents[{index}] has no string field 'text'; send it, or name the fields to rank "
                    "by in rank_fields"
                )
        return self

    def document_texts(self) -> list[str]:
        """What the model reads for each document: the string, its "text", or "field: value" lines of the
        rank_fields it has (Cohere's way of ranking structured documents; a missing field is left out)."""
        texts = []
        for document in self.documents:
            if isinstance(document, str):
                texts.append(document)
            elif self.rank_fields is None:
                texts.append(document["text"])
            else:
                lines = [f"{name}: {document[name]}" for name in self.rank_fields if name in document]
                texts.append("\n".join(lines))
        return texts


def _rerank_family(value: Any) -> str:
    """``/rerank`` takes TEI's ``texts`` or, as vLLM and Infinity do there, Cohere's ``documents``."""
    return "cohere" if isinstance(value, dict) and "documents" in value else "tei"


AnyRerankRequest = Annotated[
    Annotated[RerankRequest, Tag("tei")] | Annotated[CohereRerankRequest, Tag("cohere")],
    Discriminator(_rerank_family),
]


class RerankDocument(BaseModel):
    text: str


class RerankResult(BaseModel):
    index: int
    relevance_score: float
    document: RerankDocument | dict[str, Any] | None = None


class RerankUsage(BaseModel):
    prompt_tokens: int  # vLLM's and Infinity's (the same count)
    total_tokens: int


class CohereRerankResponse(BaseModel):
    id: str
    results: list[RerankResult]
    meta: dict[str, Any]
    model: str
    usage: RerankUsage
    object: Literal["rerank"] = "rerank"  # Infinity's
    created: int  # Infinity's: Unix seconds


# ---- Cohere embed -------------------------------------------------------------------------------------
CohereInputType = Literal["search_document", "search_query", "classification", "clustering"]
CohereEmbeddingType = Literal["float", "int8", "uint8", "binary", "ubinary", "base64"]
CohereTruncate = Literal["NONE", "START", "END"]
COHERE_INPUT_TYPE_HELP = (
    "what the texts are for: search_query / search_document are a query's / a document's side (the model's "
    "query / document prompt, as input_type on /v1/embeddings; a ColBERT model's side); any of the four "
    "picks the model's prompt of that very name when it has one; else the model's default prompt"
)
EMBEDDING_TYPES_HELP = (
    "the encodings to return, each under its name (default: float): float, int8 / uint8 (ranges from the "
    "server's --calibration-file, else from wde's bundled sentences), binary / ubinary (sign bits packed 8 "
    "per byte), base64 (little-endian float32)"
)
COHERE_TRUNCATE_HELP = (
    "an input longer than max_model_len (or max_tokens): NONE refuses it (400), START cuts its start, END "
    "its end; null: the server's --truncate / --long-input default"
)


class CohereTextContent(RequestModel):
    """One content item of a v2 ``inputs`` entry: text (wde embeds text; no image_url)."""

    type: Literal["text"]
    text: StrictStr


class CohereEmbedInput(RequestModel):
    """A v2 ``inputs`` entry; its text items are embedded as one text, joined by newlines."""

    content: Annotated[list[CohereTextContent], Field(min_length=1)]


class CohereEmbedBody(RequestModel):
    """The fields Cohere's embed API has in v1 and v2 (wde takes v2's output_dimension and max_tokens on v1
    too)."""

    model: ModelName = Field(None, description=MODEL_HELP)
    texts: Annotated[list[StrictStr], Field(min_length=1)] | None = None
    images: None = Field(None, description="not taken: wde embeds text")
    input_type: CohereInputType | None = Field(None, description=COHERE_INPUT_TYPE_HELP)
    embedding_types: Annotated[list[CohereEmbeddingType], Field(min_length=1)] | None = Field(
        None, description=EMBEDDING_TYPES_HELP
    )
    truncate: CohereTruncate | None = Field(None, description=COHERE_TRUNCATE_HELP)
    output_dimension: Dimensions | None = None
    max_tokens: PositiveInt | None = Field(
        None, description="cut each input to N tokens (special tokens included), from the truncate side"
    )

    @field_validator("images", mode="before")
    @classmethod
    def _no_images(cls, value: Any) -> None:
        if value is not None:
            raise ValueError("wde embeds text, not images; send texts")
        return value

    @model_validator(mode="after")
    def _max_tokens_cut(self) -> CohereEmbedBody:
        if self.max_tokens is not None and self.truncate == "NONE":
            raise ValueError(
                "max_tokens: cuts every input, which truncate NONE forbids; send truncate START or END with "
                "it, or no max_tokens"
            )
        return self

    def input_texts(self) -> list[str]:
        assert self.texts is not None  # each version's validation
        return self.texts

    def input_field(self) -> str:
        """The field the texts came in."""
        return "texts"


class CohereEmbedV1Request(CohereEmbedBody):
    """``POST /v1/embed`` (Cohere v1; ``Client.embed``)."""

    texts: Annotated[list[StrictStr], Field(min_length=1)]


class CohereEmbedRequest(CohereEmbedBody):
    """``POST /v2/embed`` (Cohere v2; ``ClientV2.embed``): ``texts`` or ``inputs``, and ``input_type``."""

    input_type: CohereInputType = Field(description=COHERE_INPUT_TYPE_HELP)
    inputs: Annotated[list[CohereEmbedInput], Field(min_length=1)] | None = None
    priority: StrictInt | None = None  # accepted and ignored: one priority here

    @model_validator(mode="after")
    def _texts_or_inputs(self) -> CohereEmbedRequest:
        if (self.texts is None) == (self.inputs is None):
            raise ValueError("texts: send texts (a list of str) or inputs (text content items), one of them")
        return self

    def input_texts(self) -> list[str]:
        if self.inputs is None:
            return super().input_texts()
        return ["\n".join(item.text for item in entry.content) for entry in self.inputs]

    def input_field(self) -> str:
        return "texts" if self.inputs is None else "inputs"


class CohereEmbeddingsByType(BaseModel):
    """Each requested encoding, one entry per input."""

    float_: list[list[float]] | None = Field(None, alias="float")
    int8: list[list[int]] | None = None
    uint8: list[list[int]] | None = None
    binary: list[list[int]] | None = None
    ubinary: list[list[int]] | None = None
    base64: list[str] | None = None


class CohereApiVersion(BaseModel):
    version: str


class CohereBilledUnits(BaseModel):
    input_tokens: int  # the tokens embedded (special tokens included)


class CohereEmbedMeta(BaseModel):
    api_version: CohereApiVersion
    billed_units: CohereBilledUnits


class CohereEmbedByTypeResponse(BaseModel):
    id: str
    embeddings: CohereEmbeddingsByType
    texts: list[str]
    meta: CohereEmbedMeta
    response_type: Literal["embeddings_by_type"] = "embeddings_by_type"


class CohereEmbedFloatsResponse(BaseModel):
    """v1 without ``embedding_types``."""

    id: str
    embeddings: list[list[float]]
    texts: list[str]
    meta: CohereEmbedMeta
    response_type: Literal["embeddings_floats"] = "embeddings_floats"


class CohereErrorResponse(BaseModel):
    """Cohere's error body (its embed routes)."""

    id: str
    message: str
