"""Infinity's bodies where they differ from ours (read from the ``infinity_client`` package's models):
``POST /embeddings`` (OpenAI's, with ``dimensions: 0`` for all dimensions and a ``modality``),
``POST /classify`` (``{"input", "raw_scores"}`` -> lists of labels) and ``GET /models``. Its ``/rerank``
body is Cohere's (``server.protocols.cohere.CohereRerankRequest``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, Field, StrictBool, StrictStr

from server.protocols.common import Dimensions, ModelName, RequestModel
from server.protocols.openai import EmbeddingRequest, ModelCard, Usage


def _zero_as_none(value: Any) -> Any:
    return None if value == 0 and not isinstance(value, bool) else value


class UnversionedEmbeddingRequest(EmbeddingRequest):
    """``POST /embeddings`` (TEI serves its OpenAI route there too; Infinity's clients post here): as
    ``/v1/embeddings``, with Infinity's ``dimensions: 0`` (its default) meaning every dimension and its
    ``modality`` (text only)."""

    dimensions: Annotated[Dimensions | None, BeforeValidator(_zero_as_none)] = Field(
        None, description="keep the first N dimensions (Matryoshka); 0 or null: all"
    )
    modality: Literal["text"] = Field("text", description="Infinity's: only text is embedded here")


class InfinityClassifyRequest(RequestModel):
    """Infinity's ``POST /classify``: every label's score per text (``raw_scores``: the logits)."""

    input: Annotated[list[StrictStr], Field(min_length=1)]
    model: ModelName = None
    raw_scores: StrictBool = False


class ClassifyLabel(BaseModel):
    score: float
    label: str


class InfinityClassifyResponse(BaseModel):
    object: Literal["classify"] = "classify"
    id: str
    created: int
    model: str
    data: list[list[ClassifyLabel]]
    usage: Usage


class InfinityModelCard(ModelCard):
    """Infinity's model card: OpenAI's, with ``stats``, ``backend`` and ``capabilities`` (its client reads
    ``stats`` and takes ``owned_by`` from one name only)."""

    owned_by: str = "infinity"
    stats: dict[str, Any]
    backend: str
    capabilities: list[str]


class InfinityModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[InfinityModelCard]
