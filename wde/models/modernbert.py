"""ModernBERT encoder on flat, unpadded batches (gte-modernbert, nomic-modernbert, ModernBERT rerankers).

Differs from BERT: token embeddings only (+ LayerNorm), RoPE with one base for global layers and another for
local ones, pre-norm blocks (the first layer has no attention norm: the embedding norm precedes it), a GeGLU
MLP (``Wi`` projects to 2 x intermediate: ``act(input) * gate``), no biases unless the config asks, a final
norm, and alternating layer kinds: every ``global_attn_every_n_layers``-th layer (from layer 0) attends to the
whole sequence, the others to keys at most ``local_attention // 2`` positions away on either side (inclusive,
as transformers masks it; flash-attn's ``window_size=(w, w)``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from wde.config import num_labels
from wde.layers.activation import get_act_fn
from wde.layers.attention.layer import Attention
from wde.layers.attention.spec import AttentionSpec
from wde.layers.pooler.methods import PoolingMetadata, cls_pool, mean_pool
from wde.layers.rotary import RotaryEmbedding, rotary_self_attention
from wde.models.block_compile import compile_each
from wde.models.interface import WdeModel
from wde.models.weight_names import WeightTarget, load_weights_by_name, strip_prefix

FULL, SLIDING = "full_attention", "sliding_attention"
DEFAULT_ROPE_THETA = {FULL: 160_000.0, SLIDING: 10_000.0}  # transformers' ModernBertConfig defaults
CLASSIFIER_POOLING = {"cls": cls_pool, "mean": mean_pool}


def layer_types(config: dict[str, Any]) -> list[str]:
    """Each layer's kind: ``layer_types`` as transformers v5 saves it, else the older
    ``global_attn_every_n_layers`` (default 3): layers 0, n, 2n, ... are global."""
    num_layers = config["num_hidden_layers"]
    if config.get("layer_types"):
        kinds = list(config["layer_types"])
        unknown = set(kinds) - {FULL, SLIDING}
        if len(kinds) != num_layers or unknown:
            raise ValueError(
                f"config.json layer_types must list {num_layers} of {FULL!r} / {SLIDING!r}, got {kinds}"
            )
        return kinds
    every_n = int(config.get("global_attn_every_n_layers", 3))
    return [SLIDING if i % every_n else FULL for i in range(num_layers)]


def rope_theta(config: dict[str, Any], kind: str) -> float:
    """The RoPE base of one layer kind: ``rope_parameters[kind]["rope_theta"]`` (transformers v5), else
    ``global_rope_theta`` / ``local_rope_theta`` (the Hub's configs), else transformers' default."""
    params = (config.get("rope_parameters") or {}).get(kind) or {}
    rope_type = params.get("rope_type", "default")
    if rope_type != "default" or config.get("rope_scaling"):
        raise ValueError(
            f"ModernBERT rope_type {rope_type!r} / rope_scaling {config.get('rope_scaling')} is not "
            "supported (only plain RoPE); remove the scaling from config.json or use transformers"
        )
    if "rope_theta" in params:
        return float(params["rope_theta"])
    legacy_name = "global_rope_theta" if kind == FULL else "local_rope_theta"
    return float(config.get(legacy_name, DEFAULT_ROPE_THETA[kind]))


def layer_norm(config: dict[str, Any]) -> nn.LayerNorm:
    return nn.LayerNorm(
        config["hidden_size"], eps=config.get("norm_eps", 1e-5), bias=config.get("norm_bias", False)
    )


class ModernBertEmbeddings(nn.Module):
    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(config["vocab_size"], config["hidden_size"])
        self.norm = layer_norm(config)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.norm(self.tok_embeddings(input_ids))  # [num_tokens, hidden_size]


class ModernBertAttention(nn.Module):
    def __init__(self, config: dict[str, Any], kind: str) -> None:
        super().__init__()
        hidden_size = config["hidden_size"]
        self.num_heads = config["num_attention_heads"]
        if hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size ({hidden_size}) must be a multiple of num_attention_heads ({self.num_heads})"
            )
        self.head_size = hidden_size // self.num_heads  # ModernBERT has no head_dim
        bias = config.get("attention_bias", False)
        self.Wqkv = nn.Linear(hidden_size, 3 * hidden_size, bias=bias)  # fused query/key/value
        self.Wo = nn.Linear(hidden_size, hidden_size, bias=bias)
        window = None
        if kind == SLIDING:
            half = int(config.get("local_attention", 128)) // 2
            window = (half, half)
        self.attn = Attention(
            AttentionSpec(num_heads=self.num_heads, head_size=self.head_size, sliding_window=window)
        )

    def forward(self, hidden_states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        qkv = self.Wqkv(hidden_states)  # [num_tokens, 3 * hidden_size]
        attn_out = rotary_self_attention(qkv, self.num_heads, self.head_size, cos, sin, self.attn)
        return self.Wo(attn_out)  # [num_tokens, hidden_size]


class ModernBertMLP(nn.Module):
    """GeGLU: ``Wo(act(input) * gate)`` where ``input, gate = Wi(x).chunk(2)``."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        hidden_size, intermediate_size = config["hidden_size"], config["intermediate_size"]
        bias = config.get("mlp_bias", False)
        self.Wi = nn.Linear(hidden_size, 2 * intermediate_size, bias=bias)
        self.act = get_act_fn(config.get("hidden_activation", "gelu"))
        self.Wo = nn.Linear(intermediate_size, hidden_size, bias=bias)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        projected, gate = self.Wi(hidden_states).chunk(2, dim=-1)  # 2 x [num_tokens, intermediate_size]
        return self.Wo(self.act(projected) * gate)  # [num_tokens, hidden_size]


class ModernBertLayer(nn.Module):
    """Pre-norm block: ``h += attn(attn_norm(h)); h += mlp(mlp_norm(h))``; layer 0 has no attention norm."""

    def __init__(self, config: dict[str, Any], layer_index: int, kind: str) -> None:
        super().__init__()
        self.kind = kind  # global or sliding: which RoPE base its attention rotates with
        self.attn_norm = nn.Identity() if layer_index == 0 else layer_norm(config)
        self.attn = ModernBertAttention(config, kind)
        self.mlp_norm = layer_norm(config)
        self.mlp = ModernBertMLP(config)

    def forward(self, hidden_states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        hidden_states = hidden_states + self.attn(self.attn_norm(hidden_states), cos, sin)
        return self.mlp_block(hidden_states)

    def mlp_block(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """norm -> GeGLU -> residual add (what torch.compile fuses)."""
        return hidden_states + self.mlp(self.mlp_norm(hidden_states))


class ModernBertModel(WdeModel):
    """Embeddings + layers + final norm; returns the last hidden state ``[num_tokens, hidden_size]``."""

    # the encoder inside a ForMaskedLM / ForSequenceClassification checkpoint ("model.layers...")
    weight_prefixes = ("model.",)

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.embeddings = ModernBertEmbeddings(config)
        self.layer_kinds = kinds = layer_types(config)
        layers = [ModernBertLayer(config, index, kind) for index, kind in enumerate(self.layer_kinds)]
        self.layers = nn.ModuleList(layers)
        self.final_norm = layer_norm(config)
        head_size = layers[0].attn.head_size
        # one RoPE per base (no parameters or buffers: a plain dict)
        self.rotary: dict[str, RotaryEmbedding] = {
            kind: RotaryEmbedding(head_size, rope_theta(config, kind)) for kind in sorted(set(kinds))
        }

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        del token_type_ids  # ModernBERT has no segment embeddings
        hidden_states = self.embeddings(input_ids)  # [num_tokens, hidden_size]
        # cos, sin [num_tokens, 1, head_size] per RoPE base, once per forward, shared by its layers
        dtype = hidden_states.dtype
        cos_sin = {kind: rotary.cos_sin(positions, dtype) for kind, rotary in self.rotary.items()}
        for layer, kind in zip(self.layers, self.layer_kinds, strict=True):
            hidden_states = layer(hidden_states, *cos_sin[kind])
        return self.final_norm(hidden_states)

    def compile_blocks(self) -> None:
        """torch.compile each layer's MLP block with dynamic token counts; attention stays eager."""
        compile_each(self.layers, "mlp_block")

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        def target(name: str) -> WeightTarget:
            return strip_prefix(name, self.weight_prefixes), None

        return load_weights_by_name(self, weights, target)


class ModernBertPredictionHead(nn.Module):
    """dense -> activation -> LayerNorm on the pooled state (before the classifier)."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        hidden_size = config["hidden_size"]
        self.dense = nn.Linear(hidden_size, hidden_size, bias=config.get("classifier_bias", False))
        self.act = get_act_fn(config.get("classifier_activation", "gelu"))
        self.norm = layer_norm(config)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.norm(self.act(self.dense(pooled)))  # [num_seqs, hidden_size]


class ModernBertForSequenceClassification(WdeModel):
    """Cross-encoder: ModernBERT, pooled by ``classifier_pooling`` ("cls" or "mean" over the sequence's
    tokens), head, classifier -> ``[num_seqs, num_labels]``."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        pooling = config.get("classifier_pooling", "cls")
        if pooling not in CLASSIFIER_POOLING:
            raise ValueError(
                f"classifier_pooling {pooling!r} is not one of {sorted(CLASSIFIER_POOLING)}; fix config.json"
            )
        self.pool = CLASSIFIER_POOLING[pooling]
        self.model = ModernBertModel(config)
        self.head = ModernBertPredictionHead(config)
        self.classifier = nn.Linear(config["hidden_size"], num_labels(config))

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.model(input_ids, positions, token_type_ids)

    def compute_logits(self, hidden_states: torch.Tensor, meta: PoolingMetadata) -> torch.Tensor:
        pooled = self.pool(hidden_states, meta)  # [num_seqs, hidden_size]
        return self.classifier(self.head(pooled))  # [num_seqs, num_labels]

    def compile_blocks(self) -> None:
        self.model.compile_blocks()

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        # the checkpoint's names are ours: model.*, head.*, classifier.*
        return load_weights_by_name(self, weights, lambda name: (name, None))
