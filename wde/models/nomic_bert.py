"""NomicBERT encoder on flat, unpadded batches (nomic-ai/nomic-embed-text-v1, -v1.5, nomic-bert-2048).

GTE's blocks (``wde/models/gte.py``) with NomicBERT's settings: RoPE with its own base (1,000 in
transformers' config, ``rotary_emb_base`` in the published ones) over ``rotary_emb_fraction`` of each head,
a SwiGLU MLP ``fc2(fc11(x) * silu(fc12(x)))``, no biases in the blocks unless the published config asks for
them (``qkv_proj_bias`` for Wqkv and out_proj, ``mlp_fc1_bias``, ``mlp_fc2_bias``), token-type embeddings
when ``type_vocab_size > 0``, post-norm blocks (or the remote code's pre-norm ones with ``prenorm: true``).

Two config spellings, one set of weight names:

- transformers' (``"model_type": "nomic_bert"``, hidden_size, num_hidden_layers, ``rope_parameters``), saved
  under the published names below (transformers reverses its conversion on save), or as its modules name
  them (``save_original_format=False``: ``layers.N.self_attn.q_proj``, ``mlp.up_proj``, ...);
- published, for remote code (``auto_map`` to nomic-ai/nomic-bert-2048; the GPT-2-based config: n_embd,
  n_head, n_layer, n_inner, n_positions, layer_norm_epsilon, activation_function "swiglu", rotary_emb_*):
  ``embeddings.word_embeddings``, ``emb_ln``, ``encoder.layers.N.attn.Wqkv``, ``attn.out_proj``,
  ``mlp.fc11`` / ``fc12`` / ``fc2``, ``norm1`` / ``norm2``, a classifier's encoder behind ``bert.``.
  ``wde/model_folder/nomic_bert_config.py`` maps that config onto transformers' names; wde never runs the
  code.
"""

from __future__ import annotations

import re
from typing import Any, cast

import torch

from wde.model_folder.nomic_bert_config import GATED_ACTIVATIONS
from wde.models.gte import (
    BlockBiases,
    GteForSequenceClassification,
    GteLayer,
    GteModel,
    GteRope,
    GteRotaryEmbedding,
    refuse_settings,
)
from wde.models.weight_names import WeightTarget, fused_rows, strip_prefix

DEFAULT_ROPE_THETA = 1000.0  # transformers' NomicBertConfig
WEIGHT_PREFIXES = ("nomic_bert.", "bert.")  # the encoder inside transformers' / the remote code's heads
# the flash-attn-style block names of contrastors' and Jina v3's remote code -> GTE's
FLASH_BLOCK_RENAMES = (
    (re.compile(r"^emb_ln\."), "embeddings.LayerNorm."),
    (re.compile(r"^encoder\.layers\."), "encoder.layer."),
    (re.compile(r"\.norm1\."), ".attn_ln."),
    (re.compile(r"\.norm2\."), ".mlp_ln."),
)
# published names -> GTE's (gte.py maps transformers' module names; fc11 / fc12 fill up_gate_proj below)
_RENAMES = (
    *FLASH_BLOCK_RENAMES,
    (re.compile(r"\.attn\.Wqkv\."), ".attention.qkv_proj."),
    (re.compile(r"\.attn\.out_proj\."), ".attention.o_proj."),
    (re.compile(r"\.mlp\.fc2\."), ".mlp.down_proj."),
)
_FC1 = re.compile(r"^(encoder\.layer\.\d+\.mlp)\.fc1([12])\.(weight|bias)$")


# ---- config ------------------------------------------------------------------------------------------------
def rotary_dim(config: dict[str, Any], head_size: int) -> int:
    """The rotated dimensions of a head: all of them in transformers' config, ``rotary_emb_fraction``."""
    return round(head_size * float(config.get("rotary_emb_fraction", 1.0)))


def unsupported_settings(config: dict[str, Any]) -> list[str]:
    """The remote code's switches wde does not implement, as set in a standard ``config`` (none in the
    published embedders)."""
    found = []
    activation = config.get("activation_function", "swiglu")
    if activation not in GATED_ACTIVATIONS:
        found.append(f"activation_function {activation!r} (only the gated {' / '.join(GATED_ACTIVATIONS)})")
    head_size = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    fraction = float(config.get("rotary_emb_fraction", 1.0))
    if fraction <= 0:
        found.append("rotary_emb_fraction 0 (learned absolute positions; only rotary ones)")
    elif head_size * fraction != rotary_dim(config, head_size) or rotary_dim(config, head_size) % 2:
        found.append(f"rotary_emb_fraction {fraction} (an even number of each head's {head_size} dimensions)")
    switches = {
        "rotary_emb_interleaved": "(GPT-J pairs; only rotate-half)",
        "rotary_emb_scale_base": "(xPos scaling)",
        "parallel_block": "(parallel attention and MLP)",
        "causal": "(a causal encoder)",
        "use_rms_norm": "(only LayerNorm)",
        "moe_every_n_layers": "(mixture-of-experts layers, nomic-embed-text-v2-moe)",
        "num_experts": "(mixture-of-experts layers, nomic-embed-text-v2-moe)",
    }
    for name, why in switches.items():
        if config.get(name):
            found.append(f"{name} {config[name]!r} {why}")
    rope_type = (config.get("rope_parameters") or {}).get("rope_type", "default")
    if rope_type != "default":
        found.append(f"rope_parameters.rope_type {rope_type!r} (only 'default')")
    return found


def check_config(config: dict[str, Any]) -> None:
    """Raises one line naming every setting of a standard ``config`` wde cannot serve NomicBERT with."""
    refuse_settings("NomicBERT", unsupported_settings(config))


# ---- models ------------------------------------------------------------------------------------------------
class NomicBertModel(GteModel):
    """Embeddings + layers; returns the last hidden state ``[num_tokens, hidden_size]`` (pooled as the
    sentence-transformers config says: mean for nomic-embed-text)."""

    weight_prefixes = WEIGHT_PREFIXES

    def __init__(self, config: dict[str, Any], add_pooler: bool = False) -> None:
        """``config``: as ``nomic_bert_config.standard_config`` maps it (``read_model_info`` does)."""
        super().__init__(config, add_pooler)
        self.prenorm = bool(config.get("prenorm", False))

    def check_config(self, config: dict[str, Any]) -> None:
        check_config(config)

    def block_biases(self, config: dict[str, Any]) -> BlockBiases:
        qkv = bool(config.get("qkv_proj_bias", False))  # the remote code's out_proj follows it
        up_gate, down = bool(config.get("mlp_fc1_bias", False)), bool(config.get("mlp_fc2_bias", False))
        return BlockBiases(qkv=qkv, output=qkv, up_gate=up_gate, down=down)

    def make_rotary(self, config: dict[str, Any], head_size: int) -> GteRotaryEmbedding:
        theta = (config.get("rope_parameters") or {}).get("rope_theta", DEFAULT_ROPE_THETA)
        return GteRotaryEmbedding(rotary_dim(config, head_size), GteRope(float(theta)))

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        if not self.prenorm:
            return super().forward(input_ids, positions, token_type_ids)
        # the remote code's pre-norm blocks: the residual stream is carried, and the last block's MLP output
        # is returned without it (as NomicBertEncoder returns hidden_states)
        residual = self.embeddings(input_ids, token_type_ids)  # [num_tokens, hidden_size]
        cos, sin = self.rotary_emb.cos_sin(positions, residual.dtype)  # [num_tokens, 1, rotary_dim]
        hidden_states = None
        for module in self.encoder.layer:
            layer = cast(GteLayer, module)
            if hidden_states is not None:
                residual = residual + hidden_states
            residual = residual + layer.attention(layer.attn_ln(residual), cos, sin)
            hidden_states = layer.mlp(layer.mlp_ln(residual))  # [num_tokens, hidden_size]
        assert hidden_states is not None, "NomicBERT needs at least one layer"
        return hidden_states

    def weight_target(self, name: str) -> WeightTarget:
        """A checkpoint name of any layout (prefix stripped) -> our parameter and its rows."""
        name = strip_prefix(name, self.weight_prefixes)
        for pattern, replacement in _RENAMES:
            name = pattern.sub(replacement, name)
        match = _FC1.match(name)
        if match:  # fc11 is the up projection, fc12 the gate: up rows first in up_gate_proj
            size = self.config["intermediate_size"]
            return f"{match[1]}.up_gate_proj.{match[3]}", fused_rows(int(match[2]) - 1, (size, size))
        return super().weight_target(name)  # transformers' module names; a pretraining head's cls.* skipped


class NomicBertForSequenceClassification(GteForSequenceClassification):
    """Cross-encoder: NomicBERT + pooler (dense, tanh on the first token) + classifier
    -> ``[num_seqs, num_labels]`` (the encoder under ``nomic_bert.`` in transformers', ``bert.`` in the
    remote code's checkpoints)."""

    encoder_cls = NomicBertModel
