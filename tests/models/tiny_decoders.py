"""Tiny random Qwen2 and Mistral checkpoints in HuggingFace layout, as ``save_pretrained`` writes them,
offline.

Both have Qwen3's tiny shape (``tiny_qwen3.qwen3_config``): grouped-query heads (4 query, 2 key/value) of
``head_dim`` 24 != hidden / heads (16), and weights with a large spread (std 0.2) so that a masking, bias,
window or position bug moves the outputs well past the tolerances. Qwen2 gets Qwen3's trained byte-level BPE
tokenizer (``Qwen2Tokenizer``, appending ``<|endoftext|>`` as gte-Qwen2's does); Mistral a small
SentencePiece-style BPE trained here (``LlamaTokenizer``: ``<unk>`` 0, ``<s>`` 1, ``</s>`` 2) that adds
``<s>`` and, as e5-mistral's is meant to, ``</s>``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from tests.models.tiny_qwen3 import EOS, build_qwen3_tokenizer, qwen3_config
from tests.tiny_models import WEIGHT_STD, training_texts

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

QWEN2_SEED = 41
MISTRAL_SEED = 51
VOCAB_SIZE = 400  # target size of the Mistral tokenizer's trained vocabulary
LLAMA_SPECIAL_TOKENS = ["<unk>", "<s>", "</s>"]  # Llama / Mistral ids 0-2


def build_llama_tokenizer(texts: list[str]) -> PreTrainedTokenizerBase:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaTokenizer

    raw = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    raw.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=LLAMA_SPECIAL_TOKENS, show_progress=False
    )
    raw.train_from_iterator(texts, trainer)
    vocab = raw.get_vocab(with_added_tokens=False)
    if [vocab[token] for token in LLAMA_SPECIAL_TOKENS] != list(range(len(LLAMA_SPECIAL_TOKENS))):
        raise AssertionError(f"the trained vocabulary does not start with {LLAMA_SPECIAL_TOKENS}")
    merges = [tuple(pair) for pair in json.loads(raw.to_str())["model"]["merges"]]
    return LlamaTokenizer(
        vocab=vocab, merges=merges, add_bos_token=True, add_eos_token=True, pad_token="</s>"
    )


def _save(
    path: Path, seed: int, architecture: str, config: object, tokenizer: PreTrainedTokenizerBase
) -> Path:
    """Build ``architecture`` from ``config``, redraw every weight (RMSNorm scales around 1), save both."""
    import transformers

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


def save_tiny_qwen2(
    path: Path, seed: int = QWEN2_SEED, architecture: str = "Qwen2Model", **overrides: object
) -> Path:
    """A random ``Qwen2Model`` (or ``Qwen2ForCausalLM``): q/k/v biases, no q/k norms."""
    from transformers import Qwen2Config

    tokenizer = build_qwen3_tokenizer(training_texts())
    eos_id = tokenizer.convert_tokens_to_ids(EOS)
    config = Qwen2Config(
        vocab_size=len(tokenizer), eos_token_id=eos_id, pad_token_id=eos_id, **qwen3_config(**overrides)
    )
    return _save(path, seed, architecture, config, tokenizer)


def save_tiny_mistral(
    path: Path, seed: int = MISTRAL_SEED, architecture: str = "MistralModel", **overrides: object
) -> Path:
    """A random ``MistralModel`` (or ``MistralForCausalLM``): no biases, no q/k norms; full attention unless
    ``sliding_window`` is given (MistralConfig's own default, 4096, is replaced by None)."""
    from transformers import MistralConfig

    tokenizer = build_llama_tokenizer(training_texts())
    config = MistralConfig(
        vocab_size=len(tokenizer),
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
        **qwen3_config(**{"sliding_window": None, **overrides}),
    )
    return _save(path, seed, architecture, config, tokenizer)
