"""Cohere's (and Jina's) request and response bodies: ``/v1/rerank``, ``/v2/rerank``, ``/v1/embed``,
``/v2/embed``, the error shape; ``AnyRerankRequest``: ``/rerank`` takes TEI's body or Cohere's.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    Discriminator,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    Tag,
    field_validator,
    model_validator,
)

from server.protocols.common import (
    CHUNK_SCORE_HELP,
    LONG_INPUT_HELP,
    MODEL_HELP,
    TRUNCATE_PROMPT_TOKENS_HELP,
    ChunkScore,
    Dimensions,
    LongInput,
    ModelName,
    PositiveInt,
    RequestModel,
    TruncatePromptTokens,
    TruncationDirection,
)
from server.protocols.tei import INSTRUCTION_HELP, RerankRequest


# ---- rerank (Cohere, Jina) ----------------------------------------------------------------------------
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


# ---- embed --------------------------------------------------------------------------------------------
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
