"""``embeddings_by_type``: the encodings Cohere's ``embedding_types`` names, from one forward pass.

float: the float32 vectors; base64: their little-endian bytes, as ``/v1/embeddings`` encodes them; int8 /
uint8 / binary / ubinary: wde's quantization of those same vectors (``quantize``, as sentence-transformers'
``quantize_embeddings``; what ``precision`` returns on ``/embed``), int8 / uint8 with the engine's
calibration ranges for these options (``AsyncLLMEngine.quantization_ranges``: of ``--calibration-file``'s
texts, else of the bundled set; computed as the server loads for requests with no option, else on the
options' first request, and kept: the codes of a text do not depend on the batch it came in).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from server.routes.openai import embedding_value
from wde.entrypoints.async_llm_engine import AsyncLLMEngine
from wde.entrypoints.output_precision import CALIBRATED, quantize
from wde.entrypoints.task_options import EncodeOptions
from wde.entrypoints.tasks import check_operation
from wde.outputs import EmbeddingOutput

FLOAT, BASE64 = "float", "base64"


async def embeddings_by_type(
    engine: AsyncLLMEngine, texts: list[str], options: EncodeOptions, types: Sequence[str]
) -> tuple[dict[str, Any], int]:
    """({type: one encoding per text}, the tokens embedded) for ``texts`` embedded with ``options`` (dense,
    float32: no ``precision``), each type once, in the order asked."""
    # 1. refused before anything runs: a model without embeddings (a cross-encoder)
    check_operation(engine.info.model_config, "encode")
    # 2. one forward pass: the float vectors, every other type encoded from them
    outputs = cast(list[EmbeddingOutput], await engine.encode(texts, **options))
    floats = np.stack([output.embedding for output in outputs])
    encoded: dict[str, Any] = {}
    for name in dict.fromkeys(types):
        if name == FLOAT:
            encoded[name] = floats
        elif name == BASE64:
            encoded[name] = [embedding_value(output, base64_format=True) for output in outputs]
        else:
            ranges = await engine.quantization_ranges(**options) if name in CALIBRATED else None
            encoded[name] = quantize(floats, name, ranges)
    return encoded, sum(output.num_tokens for output in outputs)
