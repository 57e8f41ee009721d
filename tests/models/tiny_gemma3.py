"""A tiny random Gemma3 embedder (EmbeddingGemma's layout) as ``save_pretrained`` writes it, offline.

``Gemma3TextModel`` with ``use_bidirectional_attention``: sliding layers of a small window (config.json's
``sliding_window`` 6: each token sees 3 on either side) mixed with full layers, grouped-query heads
(4 query, 2 key/value) of ``head_dim`` 24 != hidden / heads (16), ``query_pre_attn_scalar`` != head_dim, and
different RoPE bases for local and global layers. The tokenizer is a small BPE trained here with Gemma's
normalizer, pre-tokenizer and special tokens (``<pad>`` 0, ``<eos>`` 1, ``<bos>`` 2, ``<unk>`` 3,
``<mask>`` 4), wrapped as ``GemmaTokenizer`` that adds ``<bos>`` and, as EmbeddingGemma's does, ``<eos>``.
Weights have a large spread (std 0.2) so that a masking, position or norm bug moves the outputs well past the
tolerances.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from tests.tiny_models import WEIGHT_STD, training_texts

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

SEED = 31
VOCAB_SIZE = 400  # target size of the trained vocabulary (special tokens included)
SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]  # Gemma's ids 0-4
SLIDING_WINDOW = 6  # as config.json stores it; bidirectional: |query - key| <= 3
LAYER_TYPES = ["sliding_attention", "full_attention", "sliding_attention", "sliding_attention"]
# EmbeddingGemma's prompts (config_sentence_transformers.json), a few of them
PROMPTS = {
    "query": "task: search result | query: ",
    "document": "title: none | text: ",
    "Classification": "task: classification | query: ",
}


def gemma3_config(**overrides: object) -> dict[str, object]:
    config: dict[str, object] = {
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": len(LAYER_TYPES),
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 24,  # != hidden_size / num_attention_heads (64 / 4 = 16)
        "query_pre_attn_scalar": 20,  # the attention scale is 20 ** -0.5, not head_dim ** -0.5
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-6,
        "sliding_window": SLIDING_WINDOW,
        "layer_types": LAYER_TYPES,
        "use_bidirectional_attention": True,
        "hidden_activation": "gelu_pytorch_tanh",
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": 1000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
        },
        "pad_token_id": 0,
        "eos_token_id": 1,
        "bos_token_id": 2,
    }
    config.update(overrides)
    return config


def build_gemma_tokenizer(texts: list[str]) -> PreTrainedTokenizerBase:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import GemmaTokenizer

    raw = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True))
    raw.normalizer = normalizers.Replace(" ", "▁")
    raw.pre_tokenizer = pre_tokenizers.Split(pattern=" ", behavior="merged_with_previous", invert=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS, show_progress=False)
    raw.train_from_iterator(texts, trainer)
    vocab = raw.get_vocab(with_added_tokens=False)
    if [vocab[token] for token in SPECIAL_TOKENS] != list(range(len(SPECIAL_TOKENS))):
        raise AssertionError(f"the trained vocabulary does not start with {SPECIAL_TOKENS}")
    merges = [tuple(pair) for pair in json.loads(raw.to_str())["model"]["merges"]]
    return GemmaTokenizer(vocab=vocab, merges=merges, add_bos_token=True, add_eos_token=True)


def _randomize_(model: torch.nn.Module, seed: int) -> None:
    """Redraw every parameter; Gemma's RMSNorm scales by (1 + weight), so noise around 0 is a scale near 1."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * WEIGHT_STD)


def save_tiny_gemma3(path: Path, seed: int = SEED, **overrides: object) -> Path:
    """A random ``Gemma3TextModel`` with a freshly trained Gemma tokenizer."""
    from transformers import Gemma3TextConfig, Gemma3TextModel

    tokenizer = build_gemma_tokenizer(training_texts())
    config = Gemma3TextConfig(
        vocab_size=len(tokenizer), architectures=["Gemma3TextModel"], **gemma3_config(**overrides)
    )
    torch.manual_seed(seed)
    model = Gemma3TextModel(config)
    _randomize_(model, seed)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def save_embeddinggemma_like(path: Path, hf_dir: Path, max_seq_length: int) -> Path:
    """The model saved by sentence-transformers as EmbeddingGemma is: Transformer -> Pooling(mean) ->
    Dense(64 -> 128, no bias, identity) -> Dense(128 -> 64, no bias, identity) -> Normalize, with prompts."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import modules

    transformer = modules.Transformer(str(hf_dir), max_seq_length=max_seq_length)
    hidden_size = transformer.get_embedding_dimension()
    dense_up = modules.Dense(
        hidden_size, 2 * hidden_size, bias=False, activation_function=torch.nn.Identity()
    )
    dense_down = modules.Dense(
        2 * hidden_size, hidden_size, bias=False, activation_function=torch.nn.Identity()
    )
    generator = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for dense in (dense_up, dense_down):
            dense.linear.weight.copy_(
                torch.randn(dense.linear.weight.shape, generator=generator) * WEIGHT_STD
            )
    pipeline = [transformer, modules.Pooling(hidden_size, "mean"), dense_up, dense_down, modules.Normalize()]
    SentenceTransformer(modules=pipeline, prompts=PROMPTS).save(str(path))
    return path
