"""``embeddings_by_type``: the encodings Cohere's ``embedding_types`` names, from one forward pass.

float: the float32 vectors; base64: their little-endian bytes, as ``/v1/embeddings`` encodes them; int8 /
uint8 / binary / ubinary: wde's quantization of those same vectors (``quantize``, as sentence-transformers'
``quantize_embeddings``; what ``precision`` returns on ``/embed``), int8 / uint8 with the engine's
calibration ranges for these options. Those ranges are the engine's own: kept from an earlier request with
the same options or, on the first, computed by the engine as it does for ``precision`` (a one-input request
with that precision embeds its calibration texts once and keeps their ranges).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from server.routes.openai import embedding_value
from wde.engine.errors import OutputNotSupportedError
from wde.entrypoints.async_llm_engine import AsyncLLMEngine
from wde.entrypoints.output_precision import CALIBRATED, quantize
from wde.entrypoints.tasks import check_operation
from wde.inputs import PoolingParams
from wde.outputs import EmbeddingOutput

FLOAT, BASE64 = "float", "base64"


async def embeddings_by_type(
    engine: AsyncLLMEngine, texts: list[str], params: PoolingParams, types: Sequence[str]
) -> tuple[dict[str, Any], int]:
    """({type: one encoding per text}, the tokens embedded) for ``texts`` embedded with ``params`` (dense,
    float32: no ``precision``), each type once, in the order asked."""
    # 1. refusals before anything runs: a model without embeddings (a cross-encoder), int8 / uint8 without
    #    calibration texts
    check_operation(engine.info.model_config, "encode")
    for name in types:
        if name in CALIBRATED and not engine.calibration.texts:
            raise OutputNotSupportedError(
                f"embedding_types {name!r} needs calibration ranges, and this server has no calibration "
                "texts: start it with --calibration-file FILE (a .jsonl or .txt of ~1,000 texts like the "
                "ones you embed), or ask for float, binary, ubinary or base64"
            )
    # 2. one forward pass: the float vectors, every other type encoded from them
    outputs = cast(list[EmbeddingOutput], await engine.encode(texts, params))
    floats = np.stack([output.embedding for output in outputs])
    encoded: dict[str, Any] = {}
    for name in dict.fromkeys(types):
        if name == FLOAT:
            encoded[name] = floats
        elif name == BASE64:
            encoded[name] = [embedding_value(output, base64_format=True) for output in outputs]
        else:
            ranges = await _ranges(engine, texts[:1], params, name) if name in CALIBRATED else None
            encoded[name] = quantize(floats, name, ranges)
    return encoded, sum(output.num_tokens for output in outputs)


async def _ranges(
    engine: AsyncLLMEngine, probe: list[str], params: PoolingParams, precision: str
) -> np.ndarray:
    """The engine's int8 / uint8 ranges for ``params`` (its float request's options), computed by the engine
    when no request with these options asked for them yet."""
    ranges = engine.calibration.ranges(params)
    if ranges is None:
        await engine.encode(probe, dataclasses.replace(params, precision=precision))
        ranges = engine.calibration.ranges(params)
    if ranges is None:
        raise RuntimeError(f"the engine kept no {precision} calibration ranges for {params}")
    return ranges
