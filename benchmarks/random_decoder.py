"""Randomly initialized decoder embedders of the published shapes, saved as sentence-transformers saves them,
with the bundled MiniLM's tokenizer (no Qwen or Gemma tokenizer travels offline; both systems load this same
folder, so they embed the same tokens). For throughput benches, where the weights' values do not matter but
their shapes do (``benchmarks.gpu_decoders``, ``benchmarks.shapes``):

- Qwen3 (``DECODER_SHAPES``): ``Qwen3Model`` weights by ``save_pretrained``, last-token pooling,
  normalization, as Qwen3-Embedding;
- Gemma3 (``GEMMA3_SHAPES``): ``Gemma3TextModel`` with bidirectional attention, mean pooling, two Dense
  layers (hidden -> 4 x hidden -> hidden, no bias) and normalization, as EmbeddingGemma.

``num_layers`` cuts a shape to its first layers (a CPU bench's few minutes); every layer keeps its width.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.random_bert import MAX_POSITIONS, random_model, save_as_sentence_transformer, vocab_size_of

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

# transformers Gemma3TextConfig fields: EmbeddingGemma-300m's (24 layers: five sliding-window layers, then a
# full one, four times), and a tiny one for --smoke runs
GEMMA3_SHAPES: dict[str, dict[str, Any]] = {
    "gemma3-300m": {
        "hidden_size": 768,
        "num_hidden_layers": 24,
        "num_attention_heads": 3,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "query_pre_attn_scalar": 256,
        "intermediate_size": 1152,
        "sliding_window": 512,
        "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 4,
    },
    "gemma3-tiny": {
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 32,
        "query_pre_attn_scalar": 32,
        "intermediate_size": 96,
        "sliding_window": 16,
        "layer_types": ["sliding_attention", "full_attention"],
    },
}
GEMMA3_COMMON = {
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 2048,
    "use_bidirectional_attention": True,
    "hidden_activation": "gelu_pytorch_tanh",
    "rope_parameters": {
        "full_attention": {"rope_type": "default", "rope_theta": 1_000_000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
    },
}
DENSE_EXPANSION = 4  # EmbeddingGemma's Dense layers: 768 -> 3072 -> 768


def write_random_decoder(
    directory: Path, shape: str, tokenizer_dir: Path, device: str = "cpu", num_layers: int | None = None
) -> Path:
    """A random ``Qwen3Model`` (float16 weights) of ``shape`` (``DECODER_SHAPES``), its first ``num_layers``
    layers when given, in sentence-transformers layout under ``directory``; ``device``: where the weights
    are drawn."""
    from transformers import Qwen3Config, Qwen3Model

    fields = {**DECODER_SHAPES[shape], **({"num_hidden_layers": num_layers} if num_layers else {})}
    config = Qwen3Config(
        vocab_size=vocab_size_of(tokenizer_dir), max_position_embeddings=MAX_POSITIONS, **COMMON, **fields
    )
    model = random_model(Qwen3Model, config, device).half()  # saved in float16: half the bytes to write
    return save_as_sentence_transformer(model, tokenizer_dir, directory, "lasttoken")


def write_random_gemma3(
    directory: Path, shape: str, tokenizer_dir: Path, device: str = "cpu", num_layers: int | None = None
) -> Path:
    """A random float32 ``Gemma3TextModel`` of ``shape`` (``GEMMA3_SHAPES``) in EmbeddingGemma's
    sentence-transformers layout under ``directory``. ``num_layers`` keeps the first layers, the last of them
    a full-attention one (EmbeddingGemma's first five are all sliding), so that both kinds are timed."""
    from transformers import Gemma3TextConfig, Gemma3TextModel

    fields = dict(GEMMA3_SHAPES[shape])
    if num_layers:
        fields["num_hidden_layers"] = num_layers
        fields["layer_types"] = [*fields["layer_types"][: num_layers - 1], "full_attention"]
    config = Gemma3TextConfig(
        vocab_size=vocab_size_of(tokenizer_dir), architectures=["Gemma3TextModel"], **GEMMA3_COMMON, **fields
    )
    model = random_model(Gemma3TextModel, config, device)
    hidden = config.hidden_size
    return save_as_sentence_transformer(
        model, tokenizer_dir, directory, "mean", dense_widths=(DENSE_EXPANSION * hidden, hidden)
    )
