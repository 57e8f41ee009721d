"""The per-request options of each task, declared once: ``LLM`` and ``AsyncLLMEngine`` take them as keyword
arguments (``**options: Unpack[ScoreOptions]``), every HTTP route passes its API's fields under these
names, and ``pooling_params`` is the one place they become a ``PoolingParams``.

A new option is one field of ``PoolingParams`` plus one line in the ``TypedDict`` of each task it applies
to; ``LLM``, ``AsyncLLMEngine`` and the server's engine link need no change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from wde.inputs import PoolingParams


class EncodeOptions(TypedDict, total=False):
    """``encode``: see ``PoolingParams`` for each field's meaning and default."""

    normalize: bool | None
    dimensions: int | None
    truncate: bool | None
    prompt_name: str | None  # also picks a LoRA task adapter named like it (Jina v3)
    output: str | Sequence[str] | None  # "dense", "sparse", "multi_vector", or several
    max_active_dims: int | None
    input_type: str | None  # "query" or "document"
    precision: str | None  # float32, int8, uint8, binary, ubinary
    long_input: str | None  # "truncate", "error", "chunk"
    truncation_direction: str  # "right" or "left"
    max_input_tokens: int | None


class ClassifyOptions(TypedDict, total=False):
    """``classify``; ``score`` and ``rerank`` take these and ``ScoreOptions``' own."""

    truncate: bool | None
    raw_scores: bool  # the logits, not the activated scores
    truncation_direction: str
    max_input_tokens: int | None


class ScoreOptions(ClassifyOptions, total=False):
    """``score`` and ``rerank``."""

    instruction: str | None  # an LLM reranker's {instruction}
    long_input: str | None
    chunk_score: str | None  # a chunked document's score from its windows': "max", "mean", "first"


def pooling_params(
    options: Mapping[str, Any], accepted: type[EncodeOptions | ClassifyOptions], caller: str
) -> PoolingParams:
    """The ``PoolingParams`` of a call's keyword options; ``accepted`` is its task's ``TypedDict`` (a name it
    lacks is refused as Python refuses an unknown keyword), ``caller`` names the call in that error.
    ``output`` may be any sequence of kinds; ``precision="float32"`` is the default (None)."""
    unknown = sorted(set(options) - set(accepted.__annotations__))
    if unknown:
        raise TypeError(
            f"{caller}() got unexpected keyword argument(s) {', '.join(map(repr, unknown))}; "
            f"it takes: {', '.join(accepted.__annotations__)}"
        )
    fields = dict(options)
    output = fields.get("output")
    if output is not None and not isinstance(output, str) and isinstance(output, Sequence):
        fields["output"] = tuple(output)
    if fields.get("precision") == "float32":
        fields["precision"] = None
    return PoolingParams(**fields)
