"""A tiny random Qwen3 checkpoint in HuggingFace layout, as ``save_pretrained`` writes it, offline.

The tokenizer is a small byte-level BPE trained here with Qwen's pre-tokenizer and special tokens
(``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``, ``<think>``, ``</think>``), wrapped as
``Qwen2Tokenizer``; like Qwen3-Embedding's, its post-processor appends ``<|endoftext|>`` to every text.
Grouped-query heads (4 query, 2 key/value) of ``head_dim`` 24 != hidden / heads (16), and weights with a large
spread (std 0.2) so that a masking, position or norm bug moves the outputs well past the tolerances.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from tests.tiny_models import WEIGHT_STD, training_texts

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

SEED = 12
VOCAB_SIZE = 512  # target size of the trained vocabulary (special tokens included)
EOS = "<|endoftext|>"
SPECIAL_TOKENS = [EOS, "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
# Qwen2's pre-tokenizer split (transformers' Qwen2Tokenizer)
PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"""
    r"""\s+(?!\S)|\s+"""
)


def qwen3_config(**overrides: object) -> dict[str, object]:
    config: dict[str, object] = {
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 24,  # != hidden_size / num_attention_heads (64 / 4 = 16)
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000.0},
        "tie_word_embeddings": False,
    }
    config.update(overrides)
    return config


def build_qwen3_tokenizer(texts: list[str], append_eos: bool = True) -> PreTrainedTokenizerBase:
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, processors, trainers
    from transformers import Qwen2Tokenizer

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # "yes" and "no" must be single tokens: the reranker reads their logits
    raw.train_from_iterator([*texts, *(["yes", "no"] * 200)], trainer)
    vocab = raw.get_vocab(with_added_tokens=False)
    for word in ("yes", "no"):
        if word not in vocab:
            raise AssertionError(f"the trained vocabulary lacks {word!r}")
    merges = [tuple(pair) for pair in json.loads(raw.to_str())["model"]["merges"]]
    tokenizer = Qwen2Tokenizer(vocab=vocab, merges=merges, unk_token=None, eos_token=EOS, pad_token=EOS)
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIAL_TOKENS[1:]})
    if append_eos:
        eos_id = tokenizer.convert_tokens_to_ids(EOS)
        tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
            single=f"$A:0 {EOS}:0", pair=f"$A:0 {EOS}:0 $B:1 {EOS}:1", special_tokens=[(EOS, eos_id)]
        )
    return tokenizer


def save_tiny_qwen3(
    path: Path,
    seed: int = SEED,
    architecture: str = "Qwen3Model",
    append_eos: bool = True,
    **overrides: object,
) -> Path:
    """A random ``Qwen3Model`` (or ``Qwen3ForCausalLM``) with a freshly trained tokenizer (appending EOS as
    Qwen3-Embedding's does, or not, as Qwen3-Reranker's)."""
    import transformers
    from transformers import Qwen3Config

    tokenizer = build_qwen3_tokenizer(training_texts(), append_eos)
    eos_id = tokenizer.convert_tokens_to_ids(EOS)
    config = Qwen3Config(
        vocab_size=len(tokenizer), eos_token_id=eos_id, pad_token_id=eos_id, **qwen3_config(**overrides)
    )
    torch.manual_seed(seed)
    model = getattr(transformers, architecture)(config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator) * WEIGHT_STD
            param.copy_(1.0 + noise if name.endswith("norm.weight") else noise)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
