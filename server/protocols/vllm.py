"""vLLM's pooling bodies (``vllm/entrypoints/pooling/*/protocol.py`` of vLLM 0.32): ``/score``, ``/classify``,
``/pooling``. The fields wde uses are declared; vLLM's others (``request_id``, ``priority``, ``cache_salt``,
``padding``, ...) are ignored as any unknown field is (``server/ignored_fields.py``). Text inputs only:
multimodal content and chat ``messages`` are not served."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StrictBool, StrictStr, model_validator

from server.errors import UnpairedFieldsError
from server.protocols.common import (
    MODEL_HELP,
    TRUNCATE_PROMPT_TOKENS_HELP,
    Dimensions,
    Inputs,
    ModelName,
    RequestModel,
    TruncatePromptTokens,
    TruncationDirection,
)
from server.protocols.openai import Usage

USE_ACTIVATION_HELP = (
    "vLLM's: false answers the classifier's logits (an embedding model: not normalized); null: activated"
)
ScoreTexts = StrictStr | Annotated[list[StrictStr], Field(min_length=1)]

# vLLM's four spellings of a score request's two sides, as (first, second) field names.
SCORE_SIDES = (("text_1", "text_2"), ("queries", "documents"), ("queries", "items"), ("data_1", "data_2"))


class VLLMRequest(RequestModel):
    """The fields every vLLM pooling body has that wde serves."""

    model: ModelName = Field(None, description=MODEL_HELP)
    user: str | None = None  # accepted and ignored, as vLLM does
    truncate_prompt_tokens: TruncatePromptTokens | None = Field(None, description=TRUNCATE_PROMPT_TOKENS_HELP)
    truncation_side: TruncationDirection = "right"
    use_activation: StrictBool | None = Field(None, description=USE_ACTIVATION_HELP)


class ScoreRequest(VLLMRequest):
    """``POST /score``: ``text_1`` against ``text_2``, 1:1, 1:N or N:N (vLLM also spells them
    ``queries`` / ``documents``, ``queries`` / ``items`` or ``data_1`` / ``data_2``)."""

    text_1: ScoreTexts
    text_2: ScoreTexts
    instruction: StrictStr | None = None

    @model_validator(mode="before")
    @classmethod
    def _other_spellings(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "text_1" in data or "text_2" in data:
            return data
        for first, second in SCORE_SIDES[1:]:
            if first in data and second in data:
                rest = {key: value for key, value in data.items() if key not in (first, second)}
                return {**rest, "text_1": data[first], "text_2": data[second]}
        return data

    def sides(self) -> tuple[list[str], list[str]]:
        """(text_1, text_2) as lists, checked 1:1, 1:N or N:N as vLLM checks them."""
        texts_1 = [self.text_1] if isinstance(self.text_1, str) else list(self.text_1)
        texts_2 = [self.text_2] if isinstance(self.text_2, str) else list(self.text_2)
        if len(texts_1) > 1 and len(texts_1) != len(texts_2):
            raise UnpairedFieldsError(
                f"text_1 has {len(texts_1)} texts and text_2 has {len(texts_2)}: input lengths must be 1:1, "
                "1:N or N:N"
            )
        return texts_1, texts_2


class ScoreData(BaseModel):
    index: int
    object: Literal["score"] = "score"
    score: float


class ScoreResponse(BaseModel):
    id: str
    object: Literal["list"] = "list"
    created: int
    model: str
    data: list[ScoreData]
    usage: Usage


class ClassificationRequest(VLLMRequest):
    """``POST /classify``: a classifier's label probabilities per input (text or token ids)."""

    input: Inputs


class ClassificationData(BaseModel):
    index: int
    label: str | None
    probs: list[float]
    num_classes: int


class ClassificationResponse(BaseModel):
    id: str
    object: Literal["list"] = "list"
    created: int
    model: str
    data: list[ClassificationData]
    usage: Usage


PoolingTask = Literal["embed", "classify", "token_embed"]


class PoolingRequest(VLLMRequest):
    """``POST /pooling``: the model's pooled output per input; ``task`` as vLLM names it (null: the model's
    own: ``embed`` for an embedding model, ``classify`` for a classifier or cross-encoder)."""

    input: Inputs
    task: PoolingTask | None = Field(
        None, description="embed (a vector), classify (label probabilities) or token_embed (token vectors)"
    )
    dimensions: Dimensions | None = None
    encoding_format: Literal["float", "base64"] = "float"


class PoolingData(BaseModel):
    index: int
    object: Literal["pooling"] = "pooling"
    data: list[list[float]] | list[float] | str


class PoolingResponse(BaseModel):
    id: str
    object: Literal["list"] = "list"
    created: int
    model: str
    data: list[PoolingData]
    usage: Usage
