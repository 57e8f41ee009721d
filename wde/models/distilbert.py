"""DistilBERT: BERT's post-LayerNorm blocks under its own names (``transformer.layer.N.attention.q_lin``,
``sa_layer_norm``, ``ffn.lin1``, ...) and config keys (``dim``, ``hidden_dim``, ``n_heads``, ``n_layers``,
``activation``); no token types, learned positions from 0 (a sinusoidal table is stored in the checkpoint
too), LayerNorm eps fixed at 1e-12. The classifier is pre_classifier -> ReLU -> classifier on [CLS]; the
masked-LM head (SPLADE) is vocab_transform -> activation -> vocab_layer_norm -> vocab_projector."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from wde.config import num_labels
from wde.layers.activation import get_act_fn
from wde.layers.attention.layer import Attention
from wde.layers.attention.spec import AttentionSpec
from wde.layers.pooler.methods import PoolingMetadata, cls_pool
from wde.models.bert import MaskedLMHead
from wde.models.block_compile import compile_each
from wde.models.interface import WdeModel
from wde.models.weight_names import WeightTarget, fused_rows, load_weights_by_name, strip_prefix

LAYER_NORM_EPS = 1e-12  # transformers hard-codes it; DistilBertConfig has no such key
_QKV = re.compile(r"^(.*)\.attention\.(q|k|v)_lin\.(weight|bias)$")
_QKV_SHARD = {"q": 0, "k": 1, "v": 2}


class DistilBertEmbeddings(nn.Module):
    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        dim = config["dim"]
        self.word_embeddings = nn.Embedding(config["vocab_size"], dim)
        self.position_embeddings = nn.Embedding(config["max_position_embeddings"], dim)
        self.LayerNorm = nn.LayerNorm(dim, eps=LAYER_NORM_EPS)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        embeddings = self.word_embeddings(input_ids) + self.position_embeddings(
            positions
        )  # [num_tokens, dim]
        return self.LayerNorm(embeddings)


class DistilBertAttention(nn.Module):
    """Fused q/k/v -> attention -> out_lin (the residual and sa_layer_norm live in the block)."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        dim = config["dim"]
        self.num_heads = config["n_heads"]
        if dim % self.num_heads != 0:
            raise ValueError(f"config.json: n_heads ({self.num_heads}) must divide dim ({dim}) evenly")
        self.head_size = dim // self.num_heads
        self.qkv_proj = nn.Linear(dim, 3 * dim)
        self.out_lin = nn.Linear(dim, dim)
        self.attn = Attention(AttentionSpec(num_heads=self.num_heads, head_size=self.head_size))

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        num_tokens = hidden_states.shape[0]
        qkv = self.qkv_proj(hidden_states)  # [num_tokens, 3 * dim]
        q, k, v = qkv.view(num_tokens, 3, self.num_heads, self.head_size).unbind(1)
        attn_out = self.attn(q, k, v)  # [num_tokens, num_heads, head_size]
        return self.out_lin(attn_out.reshape(num_tokens, -1))  # [num_tokens, dim]


class DistilBertFFN(nn.Module):
    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        self.lin1 = nn.Linear(config["dim"], config["hidden_dim"])
        self.lin2 = nn.Linear(config["hidden_dim"], config["dim"])
        self.act_fn = get_act_fn(config.get("activation", "gelu"))

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.lin2(self.act_fn(self.lin1(hidden_states)))  # [num_tokens, dim]


class DistilBertBlock(nn.Module):
    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        self.attention = DistilBertAttention(config)
        self.sa_layer_norm = nn.LayerNorm(config["dim"], eps=LAYER_NORM_EPS)
        self.ffn = DistilBertFFN(config)
        self.output_layer_norm = nn.LayerNorm(config["dim"], eps=LAYER_NORM_EPS)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        attn_out = self.sa_layer_norm(self.attention(hidden_states) + hidden_states)  # [num_tokens, dim]
        return self.mlp(attn_out)

    def mlp(self, attn_out: torch.Tensor) -> torch.Tensor:
        """FFN -> residual + LayerNorm (what torch.compile fuses)."""
        return self.output_layer_norm(self.ffn(attn_out) + attn_out)  # [num_tokens, dim]


class DistilBertTransformer(nn.Module):
    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        self.layer = nn.ModuleList(DistilBertBlock(config) for _ in range(config["n_layers"]))

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        for layer in self.layer:
            hidden_states = layer(hidden_states)
        return hidden_states


def distilbert_target(prefixes: tuple[str, ...], dim: int) -> Callable[[str], WeightTarget]:
    """HF DistilBERT names -> ours: strip the base-model prefix, fuse q_lin/k_lin/v_lin into qkv_proj."""

    def target(name: str) -> WeightTarget:
        name = strip_prefix(name, prefixes)
        match = _QKV.match(name)
        if match:
            return f"{match[1]}.attention.qkv_proj.{match[3]}", fused_rows(_QKV_SHARD[match[2]], (dim,) * 3)
        return name, None

    return target


class DistilBertModel(WdeModel):
    """Embeddings + transformer; returns the last hidden state ``[num_tokens, dim]``."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.embeddings = DistilBertEmbeddings(config)
        self.transformer = DistilBertTransformer(config)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.transformer(self.embeddings(input_ids, positions))  # DistilBERT has no token types

    def compile_blocks(self) -> None:
        """torch.compile each block's FFN + residual + LayerNorm; attention stays eager."""
        compile_each(self.transformer.layer, "mlp")

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        # a DistilBertForMaskedLM checkpoint's vocab_* head finds no parameter and is skipped
        return load_weights_by_name(self, weights, distilbert_target(("distilbert.",), self.config["dim"]))


class DistilBertForSequenceClassification(WdeModel):
    """Cross-encoder: DistilBERT + pre_classifier, ReLU, classifier on [CLS] -> ``[num_seqs, num_labels]``."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.distilbert = DistilBertModel(config)
        self.pre_classifier = nn.Linear(config["dim"], config["dim"])
        self.classifier = nn.Linear(config["dim"], num_labels(config))

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.distilbert(input_ids, positions)

    def compute_logits(self, hidden_states: torch.Tensor, meta: PoolingMetadata) -> torch.Tensor:
        first_token_states = cls_pool(hidden_states, meta)  # [num_seqs, dim]
        return self.classifier(torch.relu(self.pre_classifier(first_token_states)))  # [num_seqs, num_labels]

    def compile_blocks(self) -> None:
        self.distilbert.compile_blocks()

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        return load_weights_by_name(self, weights, distilbert_target((), self.config["dim"]))


class DistilBertForMaskedLM(WdeModel):
    """DistilBERT + its masked-LM head (vocab_transform, activation, vocab_layer_norm, vocab_projector tied to
    the word embeddings): SPLADE sparse vectors (the head runs on the pooler's token chunks only when sparse
    output is asked for), or pooled dense vectors of the encoder."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.distilbert = DistilBertModel(config)
        self.mlm_head = MaskedLMHead(
            config["dim"],
            config.get("activation", "gelu"),
            LAYER_NORM_EPS,
            self.distilbert.embeddings.word_embeddings,
            tied=config.get("tie_word_embeddings", True),
        )

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.distilbert(input_ids, positions)  # [num_tokens, dim]

    def compute_mlm_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.mlm_head(hidden_states)  # [num_tokens, vocab_size]

    def compile_blocks(self) -> None:
        self.distilbert.compile_blocks()

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        target = distilbert_target((), self.config["dim"])
        tied = self.mlm_head.tied

        def mlm_target(name: str) -> WeightTarget | None:
            if name == "vocab_projector.weight" and tied:
                return None  # a copy of the word embeddings that some checkpoints store
            if name in _MLM_HEAD_NAMES:
                return _MLM_HEAD_NAMES[name], None
            return target(name)

        return load_weights_by_name(self, weights, mlm_target)


_MLM_HEAD_NAMES = {
    "vocab_transform.weight": "mlm_head.dense.weight",
    "vocab_transform.bias": "mlm_head.dense.bias",
    "vocab_layer_norm.weight": "mlm_head.LayerNorm.weight",
    "vocab_layer_norm.bias": "mlm_head.LayerNorm.bias",
    "vocab_projector.bias": "mlm_head.bias",
    "vocab_projector.weight": "mlm_head.decoder.weight",
}
