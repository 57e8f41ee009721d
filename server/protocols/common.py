"""What every API family's bodies share (pydantic v2): the ``inputs`` / ``input`` field (texts or token ids),
the option types (dimensions, truncation, output kind, long input, precision) and ``RequestModel``.

Requests ignore unknown fields, as TEI and vLLM do (clients send fields of other servers), naming them in
the ``x-wde-ignored-fields`` response header; ``--strict-request-fields`` refuses them with 422
(``server/ignored_fields.py``). Fields that clients send and we do not use (OpenAI's ``user``) are declared
explicitly. Responses are built as plain dicts / numpy arrays and serialized with orjson; the response
models of ``server/protocols/`` document the shapes (OpenAPI) and are not used to validate what we send.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    StrictInt,
    WithJsonSchema,
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
    if all(is_token_id(item) for item in value):
        return [{"prompt_token_ids": integral_token_ids(value)}]
    prompts: list[str | dict[str, list[int]]] = []
    for index, item in enumerate(value):
        if isinstance(item, str):
            prompts.append(item)
        elif isinstance(item, list):
            prompts.append({"prompt_token_ids": integral_token_ids(item)})
        else:
            raise PydanticCustomError(
                "inputs_item_type",
                "item {index} is {type}; each input is a str or a list of int token ids",
                {"index": index, "type": "null" if item is None else type(item).__name__},
            )
    return prompts


def is_token_id(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, float) and value.is_integer()
    )


def integral_token_ids(values: list[Any]) -> list[Any]:
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
