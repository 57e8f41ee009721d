"""What NomicBERT's model folder says before load, torch-free (the family: ``wde/models/nomic_bert.py``): a
config.json published for the remote code (nomic-ai/nomic-bert-2048: GPT-2's names n_embd, n_layer, ...) under
transformers' names (``standard_config``), and the positions wde leaves unserved (``reserved_positions``)."""

from __future__ import annotations

import math
from typing import Any

# the published config's GPT-2 names -> transformers' (the remote code's NomicBertConfig is a GPT2Config)
PUBLISHED_NAMES = {
    "n_embd": "hidden_size",
    "n_layer": "num_hidden_layers",
    "n_head": "num_attention_heads",
    "n_positions": "max_position_embeddings",
    "layer_norm_epsilon": "layer_norm_eps",
}
# the remote code's defaults (its NomicBertConfig over GPT2Config) for what a published config leaves out
PUBLISHED_DEFAULTS: dict[str, Any] = {
    "n_embd": 768,
    "n_layer": 12,
    "n_head": 12,
    "n_positions": 1024,
    "layer_norm_epsilon": 1e-5,
    "vocab_size": 50257,
    "activation_function": "gelu_new",
    "type_vocab_size": 2,
    "qkv_proj_bias": True,
    "mlp_fc1_bias": True,
    "mlp_fc2_bias": True,
    "rotary_emb_fraction": 0.0,
    "rotary_emb_base": 10_000,
    "pad_vocab_size_multiple": 1,
    "max_trained_positions": 2048,
}
GATED_ACTIVATIONS = {"swiglu": "silu", "geglu": "gelu"}  # activation_function -> the gate's activation
MLP_WIDTH_MULTIPLE = 256  # the remote code's gated MLP rounds its width up to a multiple of this


def standard_config(config: dict[str, Any]) -> dict[str, Any]:
    """A published (GPT-2-named) config under transformers' names, with the remote code's defaults for what
    it leaves out; a config already under transformers' names as it is."""
    if not any(name in config for name in PUBLISHED_NAMES):
        return config
    published = {**PUBLISHED_DEFAULTS, **config}
    standard = {key: value for key, value in published.items() if key not in PUBLISHED_NAMES}
    for old, new in PUBLISHED_NAMES.items():
        standard[new] = published[old]
    hidden_size, activation = standard["hidden_size"], published["activation_function"]
    width = standard.pop("n_inner", None) or int(8 * hidden_size / 3)
    if activation in GATED_ACTIVATIONS:
        width = math.ceil(width / MLP_WIDTH_MULTIPLE) * MLP_WIDTH_MULTIPLE
    multiple = int(published["pad_vocab_size_multiple"])
    standard.update(
        intermediate_size=width,
        hidden_act=GATED_ACTIVATIONS.get(activation, activation),
        vocab_size=math.ceil(published["vocab_size"] / multiple) * multiple,  # as the remote code pads it
        rope_parameters={"rope_type": "default", "rope_theta": float(published["rotary_emb_base"])},
    )
    return standard


def reserved_positions(hf_config: dict[str, Any]) -> int:
    """With ``rotary_scaling_factor`` the remote code rescales RoPE past ``max_trained_positions`` by the
    padded batch's length (and keeps it for later batches): wde serves the lengths it leaves unscaled."""
    config = standard_config(hf_config)
    if not config.get("rotary_scaling_factor"):
        return 0
    max_trained = int(config.get("max_trained_positions", PUBLISHED_DEFAULTS["max_trained_positions"]))
    return max(0, int(config["max_position_embeddings"]) - max_trained)
