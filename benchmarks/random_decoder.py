"""Randomly initialized Qwen3 decoders of the published embedders' shapes, saved as sentence-transformers
saves Qwen3-Embedding (``Qwen3Model`` weights by ``save_pretrained``, last-token pooling, normalization),
with the bundled MiniLM's tokenizer (no Qwen tokenizer travels offline; both systems load this same folder,
so they embed the same tokens). For throughput benches, where the weights' values do not matter but their
shapes do (``benchmarks.gpu_decoders``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.random_bert import MAX_POSITIONS, SEED, save_as_sentence_transformer

# transformers Qwen3Config fields of each shape: Qwen3-Embedding-0.6B's; Qwen3-Embedding-4B's cut to 8 of its
# 36 layers (to fit a few minutes of GPU); "tiny" for --smoke runs on a CPU (head_dim 32: the fused kernels'
# power-of-two halves)
DECODER_SHAPES: dict[str, dict[str, Any]] = {
    "qwen3-0.6b": {
        "hidden_size": 1024,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 3072,
    },
    "qwen3-4b-cut": {
        "hidden_size": 2560,
        "num_hidden_layers": 8,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 9728,
    },
    "qwen3-tiny": {
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "intermediate_size": 128,
    },
}
COMMON = {"rms_norm_eps": 1e-6, "rope_theta": 1_000_000.0, "tie_word_embeddings": False}


def write_random_decoder(directory: Path, shape: str, tokenizer_dir: Path, device: str = "cpu") -> Path:
    """A random ``Qwen3Model`` (float16 weights) of ``shape`` (``DECODER_SHAPES``) in sentence-transformers
    layout under ``directory``; ``device``: where the weights are drawn."""
    import torch
    from transformers import Qwen3Config, Qwen3Model

    vocab_size = json.loads((tokenizer_dir / "config.json").read_text())["vocab_size"]
    config = Qwen3Config(
        vocab_size=vocab_size, max_position_embeddings=MAX_POSITIONS, **COMMON, **DECODER_SHAPES[shape]
    )
    torch.manual_seed(SEED)
    with torch.device(device):
        model = Qwen3Model(config).half()  # saved in float16: half the bytes to write and read
    return save_as_sentence_transformer(model, tokenizer_dir, directory, "lasttoken")
