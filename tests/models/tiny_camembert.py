"""A tiny random CamemBERT checkpoint in HuggingFace layout, as ``save_pretrained`` writes it, offline.

CamemBERT is RoBERTa-architected: ``roberta.`` prefixed weights under a head, positions numbered from
``pad_token_id + 1`` (pad 1: two reserved rows). The tokenizer is a small Unigram model trained here with
CamemBERT's special tokens in its order (``<s>NOTUSED`` 0, ``<pad>`` 1, ``</s>NOTUSED`` 2, ``<unk>`` 3, then
``<s>`` and ``</s>``; ``<mask>`` last), wrapped as ``CamembertTokenizer`` (``<s> A </s>``,
``<s> A </s></s> B </s>``). Heads of 16 (64 / 4), which the varlen kernel's vectors divide on AVX2 and
AVX-512, and weights with a large spread (std 0.2) so that a masking or position bug moves the outputs well
past the tolerances.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from tests.tiny_models import WEIGHT_STD, training_texts

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

SEED = 61
VOCAB_SIZE = 400  # target size of the trained Unigram vocabulary
MAX_POSITIONS = 66  # 64 usable: positions count from pad_token_id + 1
SPECIAL_TOKENS = ["<s>NOTUSED", "<pad>", "</s>NOTUSED", "<unk>", "<unk>NOTUSED", "<s>", "</s>"]


def build_camembert_tokenizer(texts: list[str]) -> PreTrainedTokenizerBase:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import CamembertTokenizer

    trainer = trainers.UnigramTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS, unk_token="<unk>", show_progress=False
    )
    raw = Tokenizer(models.Unigram())
    raw.pre_tokenizer = pre_tokenizers.Metaspace()
    raw.train_from_iterator(texts, trainer)
    vocab = [(piece, score) for piece, score in json.loads(raw.to_str())["model"]["vocab"]]
    if [piece for piece, _ in vocab[: len(SPECIAL_TOKENS)]] != SPECIAL_TOKENS:
        raise AssertionError(f"the trained vocabulary does not start with {SPECIAL_TOKENS}")
    return CamembertTokenizer(vocab=[*vocab, ("<mask>", 0.0)])


def save_tiny_camembert(
    path: Path, seed: int = SEED, architecture: str = "CamembertModel", **overrides: object
) -> Path:
    """A random ``CamembertModel`` (or ``CamembertForSequenceClassification``, ...; pad 1, one token type)."""
    import transformers
    from transformers import CamembertConfig

    tokenizer = build_camembert_tokenizer(training_texts())
    config = CamembertConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=96,
        max_position_embeddings=MAX_POSITIONS,
        type_vocab_size=1,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **overrides,
    )
    torch.manual_seed(seed)
    model = getattr(transformers, architecture)(config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator) * WEIGHT_STD
            param.copy_(1.0 + noise if name.endswith("LayerNorm.weight") else noise)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
