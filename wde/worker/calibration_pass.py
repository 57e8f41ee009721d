"""The calibration pass of an int8 load: a few of wde's bundled calibration sentences through the float model,
before its linears are swapped, to find the activation ranges that int8 smoothing evens out
(``wde/layers/quantization/smoothing.py``). One batch of ``NUM_TEXTS`` sentences (~1,000 tokens): seconds
of a base model's load on 2 cores (all-mpnet-base-v2: 2.8 s, the cores shared with a test run). The same
sentences every load, so two loads of a model quantize it alike."""

from __future__ import annotations

import torch

from wde.calibration import BUNDLED_TEXTS, load_calibration_texts
from wde.config import ModelConfig
from wde.layers.attention.backend import AttentionBackend
from wde.layers.forward_context import set_forward_context
from wde.layers.quantization.quantize import InputMaxima, block_linears
from wde.layers.quantization.smoothing import record_input_maxima
from wde.models.interface import WdeModel
from wde.request import Request
from wde.tokenizer import TextInput, Tokenizer
from wde.worker.input_batch import InputBatch

# 32 gave all-mpnet-base-v2 the same int8 accuracy as 128 (min cosine to float32 0.9945 / 0.9941 over 200
# documents) at a quarter of the load time
NUM_TEXTS = 32


def calibration_input_maxima(
    model: WdeModel, model_config: ModelConfig, backend_cls: type[AttentionBackend], device: torch.device
) -> InputMaxima:
    """Per block linear of ``model`` (float, weights loaded): the largest |input| per channel over the
    calibration sentences."""
    # 1. the sentences, tokenized as the engine would (cut at max_model_len)
    tokenizer = Tokenizer.of_model(model_config)
    texts: list[TextInput] = list(load_calibration_texts(BUNDLED_TEXTS)[:NUM_TEXTS])
    requests = [
        Request(f"calibration-{index}", token_ids=encoded.token_ids, token_type_ids=encoded.token_type_ids)
        for index, encoded in enumerate(tokenizer.encode_batch(texts))
    ]
    # 2. one flat batch of them through the model, its block linears watched
    batch = InputBatch.build(requests, backend_cls, device, task_adapters=model_config.task_adapters)

    def run() -> None:
        with torch.inference_mode(), set_forward_context(batch.attn_metadata, batch.adapters):
            model(batch.input_ids, batch.positions, batch.token_type_ids)

    return record_input_maxima([linear for _, _, linear in block_linears(model)], run)
