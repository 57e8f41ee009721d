"""Randomly initialized BERT encoders of the published sizes, saved as sentence-transformers saves a model
(``BertModel`` weights by ``save_pretrained``, mean pooling, normalization), with the bundled MiniLM's
tokenizer (the bert-base-uncased vocabulary). For throughput benches, where the weights' values do not matter
but their shapes do: wde and sentence-transformers load the same folder.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

# transformers BertConfig fields of each size; "tiny" is for --smoke runs on a CPU
BERT_SIZES: dict[str, dict[str, int]] = {
    "base": {
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
    },
    "large": {
        "hidden_size": 1024,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "intermediate_size": 4096,
    },
    "tiny": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 128},
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
MAX_POSITIONS = 512
SEED = 0


def write_random_bert(directory: Path, size: str, tokenizer_dir: Path, device: str = "cpu") -> Path:
    """A float32 random ``BertModel`` of ``size`` (``BERT_SIZES``) in sentence-transformers layout under
    ``directory``; ``device``: where the weights are drawn (a GPU draws BERT-large's 335M in no time)."""
    import torch
    from transformers import BertConfig, BertModel

    vocab_size = json.loads((tokenizer_dir / "config.json").read_text())["vocab_size"]
    sizes: dict[str, Any] = BERT_SIZES[size]
    config = BertConfig(vocab_size=vocab_size, max_position_embeddings=MAX_POSITIONS, **sizes)
    torch.manual_seed(SEED)
    with torch.device(device):
        # with its pooler, as sentence-transformers loads it (mean pooling ignores it)
        model = BertModel(config)
    return save_as_sentence_transformer(model, tokenizer_dir, directory, "mean")


def save_as_sentence_transformer(model: Any, tokenizer_dir: Path, directory: Path, pooling_mode: str) -> Path:
    """A transformers ``model`` with ``tokenizer_dir``'s tokenizer, saved under ``directory`` as
    sentence-transformers saves a model: Transformer (``MAX_POSITIONS`` tokens), Pooling (``pooling_mode``),
    Normalize."""
    from sentence_transformers import SentenceTransformer

    try:  # sentence-transformers >= 6.1 (its old path warns)
        from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    except ImportError:
        from sentence_transformers.models import (  # type: ignore[no-redef]
            Normalize,
            Pooling,
            Transformer,
        )

    with tempfile.TemporaryDirectory() as scratch:
        hf_dir = Path(scratch)
        model.save_pretrained(hf_dir)
        for name in TOKENIZER_FILES:
            if (tokenizer_dir / name).exists():
                shutil.copy(tokenizer_dir / name, hf_dir / name)
        transformer = Transformer(str(hf_dir), max_seq_length=MAX_POSITIONS)
        pooling = Pooling(model.config.hidden_size, pooling_mode)
        SentenceTransformer(modules=[transformer, pooling, Normalize()], device="cpu").save(str(directory))
    return directory


def count_matmul_params(model_dir: Path) -> int:
    """Parameters of the model's layers (not the embedding tables, which do lookups, nor BERT's unused
    pooler): the P of the forward's ~2 x P FLOPs per token, read from the safetensors headers."""
    import math

    from safetensors import safe_open

    num_params = 0
    for path in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open has no __iter__)
                if not any(part in name for part in ("embeddings.", "embed_tokens.", "pooler.")):
                    num_params += math.prod(f.get_slice(name).get_shape())
    return num_params
