"""Tiny random ModernBERT checkpoints (``ModernBertModel`` / ``ModernBertForSequenceClassification``) in HF
layout, with a freshly trained byte-level BPE tokenizer, built offline.

Four layers alternate global / local attention (``global_attn_every_n_layers=2``) with a local window of 4
tokens on each side (``local_attention=8``), so sequences of up to 64 tokens see both layer kinds and the
window; weights have a large spread (std 0.2) so a masking, window or RoPE bug moves outputs far past the
tolerances. The two RoPE bases differ a lot, so swapping them shows too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from tests.tiny_models import WEIGHT_STD, training_texts

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

MAX_POSITIONS = 64
VOCAB_SIZE = 500  # target size of the trained BPE vocabulary (256 bytes + specials + merges)
SPECIAL_TOKENS = ("[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]")  # ids 0-4
NUM_SPECIAL_TOKENS = len(SPECIAL_TOKENS)
LOCAL_ATTENTION = 8  # local layers see 4 tokens on each side
CONFIG = {
    "hidden_size": 32,
    "intermediate_size": 24,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "max_position_embeddings": MAX_POSITIONS,
    "local_attention": LOCAL_ATTENTION,
    "global_attn_every_n_layers": 2,
    "global_rope_theta": 160_000.0,
    "local_rope_theta": 100.0,  # far from the global base: a swap changes outputs
    "initializer_range": WEIGHT_STD,
}
# The same flags, as the Hub's configs (written before transformers v5) spell them.
HUB_CONFIG_KEYS = ("global_attn_every_n_layers", "global_rope_theta", "local_rope_theta")


def build_tokenizer(texts: list[str]) -> PreTrainedTokenizerFast:
    """Byte-level BPE with ModernBERT's special tokens; ``[CLS] A [SEP]`` and ``[CLS] A [SEP] B [SEP]``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE(unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    raw.train_from_iterator(texts, trainer)
    ids = {token: raw.token_to_id(token) for token in SPECIAL_TOKENS}
    if list(ids.values()) != list(range(NUM_SPECIAL_TOKENS)):
        raise AssertionError(f"special token ids are {ids}, not 0-{NUM_SPECIAL_TOKENS - 1}")
    raw.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=raw,
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        mask_token="[MASK]",
        model_max_length=MAX_POSITIONS,
        model_input_names=["input_ids", "attention_mask"],
    )


def randomize_(model: torch.nn.Module, seed: int) -> None:
    """Redraw every parameter (norm scales around 1) from a seeded generator."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator) * WEIGHT_STD
            param.copy_(1.0 + noise if name.endswith("norm.weight") else noise)


def save_tiny_modernbert(
    path: Path,
    seed: int,
    architecture: str = "ModernBertModel",
    hub_style_config: bool = False,
    **overrides: object,
) -> Path:
    """A random ModernBERT (``overrides`` go to ``ModernBertConfig``: num_labels, classifier_pooling, the
    ``*_bias`` flags). ``hub_style_config`` rewrites config.json as the Hub's ModernBERT configs are (the
    ``global_attn_every_n_layers`` / ``*_rope_theta`` keys, no ``layer_types`` / ``rope_parameters``)."""
    import transformers
    from transformers import ModernBertConfig

    tokenizer = build_tokenizer(training_texts())
    ids = {
        name: tokenizer.convert_tokens_to_ids(token)
        for name, token in zip(("unk", "cls", "sep", "pad"), SPECIAL_TOKENS, strict=False)
    }
    config = ModernBertConfig(
        vocab_size=len(tokenizer),
        pad_token_id=ids["pad"],
        cls_token_id=ids["cls"],
        sep_token_id=ids["sep"],
        bos_token_id=ids["cls"],
        eos_token_id=ids["sep"],
        **{**CONFIG, **overrides},
    )
    torch.manual_seed(seed)
    model = getattr(transformers, architecture)(config)
    randomize_(model, seed)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    if hub_style_config:
        config_path = path / "config.json"
        saved = json.loads(config_path.read_text())
        saved.pop("layer_types", None)
        saved.pop("rope_parameters", None)
        saved.update({key: CONFIG[key] for key in HUB_CONFIG_KEYS})
        config_path.write_text(json.dumps(saved, indent=2))
    return path
