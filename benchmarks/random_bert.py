"""Randomly initialized BERT encoders of the published sizes, saved as sentence-transformers saves a model
(``BertModel`` weights by ``save_pretrained``, mean pooling, normalization), with the bundled MiniLM's
tokenizer (the bert-base-uncased vocabulary). For throughput benches, where the weights' values do not matter
but their shapes do: wde and sentence-transformers load the same folder. Beside them: an XLM-RoBERTa encoder
of a BERT size (bge-m3's is XLM-R large: CLS pooling) with the vocabulary cut to the same tokenizer's, and a
one-label BERT cross-encoder saved as ``CrossEncoder.save`` writes it.
"""

from __future__ import annotations

import itertools
import json
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# transformers BertConfig fields of each size; "tiny" is for --smoke runs on a CPU
BERT_SIZES: dict[str, dict[str, Any]] = {
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
CLASSIC_MODULE_PREFIX = "sentence_transformers.models."
# the classic Pooling config's flag of each pooling_mode
CLASSIC_POOLING_FLAGS = {
    "cls": "cls_token",
    "mean": "mean_tokens",
    "max": "max_tokens",
    "mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "lasttoken": "lasttoken",
}
SEED = 0


def vocab_size_of(tokenizer_dir: Path) -> int:
    """The vocabulary size in ``tokenizer_dir``'s config.json (the bundled MiniLM's: 30,522)."""
    return int(json.loads((tokenizer_dir / "config.json").read_text())["vocab_size"])


def random_model(model_class: Any, config: Any, device: str) -> Any:
    """``model_class(config)`` drawn from seed ``SEED`` on ``device`` (a GPU draws a large one in no time)."""
    import torch

    torch.manual_seed(SEED)
    with torch.device(device):
        return model_class(config)


def write_random_bert(directory: Path, size: str, tokenizer_dir: Path, device: str = "cpu") -> Path:
    """A float32 random ``BertModel`` of ``size`` (``BERT_SIZES``) in sentence-transformers layout under
    ``directory``; ``device``: where the weights are drawn (a GPU draws BERT-large's 335M in no time)."""
    from transformers import BertConfig, BertModel

    config = BertConfig(
        vocab_size=vocab_size_of(tokenizer_dir), max_position_embeddings=MAX_POSITIONS, **BERT_SIZES[size]
    )
    # with its pooler, as sentence-transformers loads it (mean pooling ignores it)
    model = random_model(BertModel, config, device)
    return write_classic_layout(save_as_sentence_transformer(model, tokenizer_dir, directory, "mean"), "mean")


def write_random_xlm_roberta(directory: Path, size: str, tokenizer_dir: Path, device: str = "cpu") -> Path:
    """A float32 random ``XLMRobertaModel`` of ``size`` (``BERT_SIZES``; bge-m3's encoder is "large") with
    ``tokenizer_dir``'s vocabulary (so its tokenizer serves: XLM-R's own 250,002 rows would only add an
    embedding table that costs lookups, not FLOPs), CLS pooling as bge-m3, in sentence-transformers layout."""
    from transformers import XLMRobertaConfig, XLMRobertaModel

    # XLM-R's positions start after padding_idx (1): two more rows than usable positions
    config = XLMRobertaConfig(
        vocab_size=vocab_size_of(tokenizer_dir), max_position_embeddings=MAX_POSITIONS + 2, **BERT_SIZES[size]
    )
    model = random_model(XLMRobertaModel, config, device)
    return write_classic_layout(save_as_sentence_transformer(model, tokenizer_dir, directory, "cls"), "cls")


def write_random_cross_encoder(directory: Path, size: str, tokenizer_dir: Path, device: str = "cpu") -> Path:
    """A float32 random one-label ``BertForSequenceClassification`` of ``size`` (``BERT_SIZES``), saved by
    ``CrossEncoder.save`` (sigmoid activation, ``MAX_POSITIONS`` tokens) under ``directory``."""
    from sentence_transformers import CrossEncoder
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(
        vocab_size=vocab_size_of(tokenizer_dir), max_position_embeddings=MAX_POSITIONS, **BERT_SIZES[size]
    )
    config.num_labels = 1  # PretrainedConfig's, not a BertConfig argument to the type checker
    model = random_model(BertForSequenceClassification, config, device)
    with tempfile.TemporaryDirectory() as scratch:
        hf_dir = save_with_tokenizer(model, tokenizer_dir, Path(scratch))
        CrossEncoder(str(hf_dir), device="cpu", max_length=MAX_POSITIONS).save(str(directory))
    return directory


def save_with_tokenizer(model: Any, tokenizer_dir: Path, hf_dir: Path) -> Path:
    """``model.save_pretrained(hf_dir)`` with ``tokenizer_dir``'s tokenizer files beside it."""
    model.save_pretrained(hf_dir)
    for name in TOKENIZER_FILES:
        if (tokenizer_dir / name).exists():
            shutil.copy(tokenizer_dir / name, hf_dir / name)
    return hf_dir


def save_as_sentence_transformer(
    model: Any, tokenizer_dir: Path, directory: Path, pooling_mode: str, dense_widths: Sequence[int] = ()
) -> Path:
    """A transformers ``model`` with ``tokenizer_dir``'s tokenizer, saved under ``directory`` as
    sentence-transformers saves a model: Transformer (``MAX_POSITIONS`` tokens), Pooling (``pooling_mode``),
    a random Dense (no bias, identity, as EmbeddingGemma's) to each of ``dense_widths``, Normalize."""
    import torch
    from sentence_transformers import SentenceTransformer

    try:  # sentence-transformers >= 6.1 (its old path warns)
        from sentence_transformers.sentence_transformer.modules import Dense, Normalize, Pooling, Transformer
    except ImportError:
        from sentence_transformers.models import (  # type: ignore[no-redef]
            Dense,
            Normalize,
            Pooling,
            Transformer,
        )

    with tempfile.TemporaryDirectory() as scratch:
        hf_dir = save_with_tokenizer(model, tokenizer_dir, Path(scratch))
        transformer = Transformer(str(hf_dir), max_seq_length=MAX_POSITIONS)
        modules = [transformer, Pooling(model.config.hidden_size, pooling_mode)]
        widths = [model.config.hidden_size, *dense_widths]
        torch.manual_seed(SEED)
        for width_in, width_out in itertools.pairwise(widths):
            modules.append(Dense(width_in, width_out, bias=False, activation_function=torch.nn.Identity()))
        SentenceTransformer(modules=[*modules, Normalize()], device="cpu").save(str(directory))
    return directory


def write_classic_layout(directory: Path, pooling_mode: str) -> Path:
    """A Transformer -> Pooling -> Normalize folder saved by sentence-transformers >= 6 rewritten in the
    classic layout of the published models (the bundled MiniLM's: ``sentence_transformers.models.*`` module
    paths, the Pooling flags, ``sentence_bert_config.json``), which every sentence-transformers version loads,
    while 6's module paths do not import in 5.x (the ONNX peer's 5.7). The weights stay as they are."""
    modules = json.loads((directory / "modules.json").read_text())
    for module in modules:
        module["type"] = CLASSIC_MODULE_PREFIX + module["type"].rsplit(".", 1)[-1]
    (directory / "modules.json").write_text(json.dumps(modules, indent=2))
    pooling_dir = directory / next(m["path"] for m in modules if m["type"].endswith(".Pooling"))
    saved = json.loads((pooling_dir / "config.json").read_text())
    dimension = saved.get("embedding_dimension", saved.get("word_embedding_dimension"))
    flags = {f"pooling_mode_{flag}": mode == pooling_mode for mode, flag in CLASSIC_POOLING_FLAGS.items()}
    (pooling_dir / "config.json").write_text(
        json.dumps({"word_embedding_dimension": dimension, **flags}, indent=2)
    )
    classic = {"max_seq_length": MAX_POSITIONS, "do_lower_case": False}
    (directory / "sentence_bert_config.json").write_text(json.dumps(classic, indent=2))
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
