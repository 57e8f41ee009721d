"""MPNet (all-mpnet-base-v2 and its cross-encoders): BERT-shaped blocks without token types, positions
counted from padding_idx + 1 as in RoBERTa, and a relative position bias added to every layer's attention
scores. The bias is one table (``encoder.relative_attention_bias``: bucket -> a value per head) shared by all
layers; it depends only on the distance between query and key, so it is built once per batch as
``[num_heads, max_seqlen, max_seqlen]`` and each attention backend cuts it to its sequences' lengths."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from wde.layers.activation import get_act_fn
from wde.layers.attention.layer import Attention
from wde.layers.attention.spec import AttentionSpec
from wde.layers.forward_context import get_forward_context
from wde.layers.pooler.methods import PoolingMetadata, cls_pool
from wde.model_folder.position_tables import MPNET_PADDING_IDX
from wde.models.bert import BertSelfOutput
from wde.models.block_compile import compile_each
from wde.models.interface import WdeModel
from wde.models.weight_names import WeightTarget, fused_qkv_target, load_weights_by_name
from wde.models.xlm_roberta import ClassifierHead

# transformers' compute_position_bias buckets with its defaults (32 buckets, distances up to 128), whatever
# relative_attention_num_buckets says; that key only sizes the table.
NUM_BUCKETS = 32
MAX_DISTANCE = 128
_QKV = re.compile(r"^(.*)\.attention\.attn\.(q|k|v)\.(weight|bias)$")
_QKV_SHARD = {"q": 0, "k": 1, "v": 2}
_RENAMES = (
    (".attention.attn.o.", ".attention.output.dense."),
    (".attention.LayerNorm.", ".attention.output.LayerNorm."),
    (".intermediate.dense.", ".intermediate."),
)


def relative_position_bucket(relative_position: torch.Tensor) -> torch.Tensor:
    """transformers' bucketing of ``key - query`` distances: half the buckets per direction, exact below
    8, logarithmic up to MAX_DISTANCE, the last bucket beyond."""
    num_buckets = NUM_BUCKETS // 2
    distance = -relative_position
    bucket = (distance < 0).to(torch.long) * num_buckets
    distance = distance.abs()
    max_exact = num_buckets // 2
    log_ratio = torch.log(distance.clamp(min=1).float() / max_exact) / math.log(MAX_DISTANCE / max_exact)
    if_large = (max_exact + log_ratio * (num_buckets - max_exact)).to(torch.long).clamp(max=num_buckets - 1)
    return bucket + torch.where(distance < max_exact, distance, if_large)


class MPNetEmbeddings(nn.Module):
    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        hidden_size = config["hidden_size"]
        self.word_embeddings = nn.Embedding(config["vocab_size"], hidden_size)
        self.position_embeddings = nn.Embedding(config["max_position_embeddings"], hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=config.get("layer_norm_eps", 1e-12))

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        embeddings = self.word_embeddings(input_ids)  # [num_tokens, hidden_size]
        embeddings = embeddings + self.position_embeddings(positions + MPNET_PADDING_IDX + 1)
        return self.LayerNorm(embeddings)


class MPNetAttention(nn.Module):
    """Fused q/k/v -> attention with the shared position bias -> o -> residual + LayerNorm."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        hidden_size = config["hidden_size"]
        self.num_heads = config["num_attention_heads"]
        self.head_size = hidden_size // self.num_heads  # MPNet has no head_dim: hidden splits evenly
        self.qkv_proj = nn.Linear(hidden_size, 3 * hidden_size)
        self.attn = Attention(
            AttentionSpec(num_heads=self.num_heads, head_size=self.head_size, position_bias=True)
        )
        self.output = BertSelfOutput(hidden_size, hidden_size, config.get("layer_norm_eps", 1e-12))

    def forward(self, hidden_states: torch.Tensor, position_bias: torch.Tensor) -> torch.Tensor:
        num_tokens = hidden_states.shape[0]
        qkv = self.qkv_proj(hidden_states)  # [num_tokens, 3 * hidden_size]
        q, k, v = qkv.view(num_tokens, 3, self.num_heads, self.head_size).unbind(1)
        attn_out = self.attn(q, k, v, position_bias)  # [num_tokens, num_heads, head_size]
        return self.output(attn_out.reshape(num_tokens, -1), hidden_states)


class MPNetLayer(nn.Module):
    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        hidden_size, intermediate_size = config["hidden_size"], config["intermediate_size"]
        self.attention = MPNetAttention(config)
        self.intermediate = nn.Linear(hidden_size, intermediate_size)
        self.act_fn = get_act_fn(config.get("hidden_act", "gelu"))
        self.output = BertSelfOutput(intermediate_size, hidden_size, config.get("layer_norm_eps", 1e-12))

    def forward(self, hidden_states: torch.Tensor, position_bias: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.attention(hidden_states, position_bias))  # [num_tokens, hidden_size]

    def mlp(self, attn_out: torch.Tensor) -> torch.Tensor:
        mlp_hidden = self.act_fn(self.intermediate(attn_out))  # [num_tokens, intermediate_size]
        return self.output(mlp_hidden, attn_out)  # [num_tokens, hidden_size]


class MPNetEncoder(nn.Module):
    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        self.layer = nn.ModuleList(MPNetLayer(config) for _ in range(config["num_hidden_layers"]))
        num_buckets = int(config.get("relative_attention_num_buckets", NUM_BUCKETS))
        self.relative_attention_bias = nn.Embedding(num_buckets, config["num_attention_heads"])

    def position_bias(self, max_seqlen: int, device: torch.device) -> torch.Tensor:
        """[num_heads, max_seqlen, max_seqlen]: the bias of query position i on key position j."""
        position = torch.arange(max_seqlen, device=device)
        buckets = relative_position_bucket(position[None, :] - position[:, None])  # [max_seqlen, max_seqlen]
        return self.relative_attention_bias(buckets).permute(2, 0, 1)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        max_seqlen = get_forward_context().attn_metadata.max_seqlen
        position_bias = self.position_bias(max_seqlen, hidden_states.device)  # once per batch, every layer
        for layer in self.layer:
            hidden_states = layer(hidden_states, position_bias)
        return hidden_states


def mpnet_target(prefixes: tuple[str, ...], hidden_size: int) -> Callable[[str], WeightTarget]:
    """HF MPNet names -> ours: strip the base-model prefix, fuse q/k/v into qkv_proj, o and the attention
    LayerNorm into BERT's output block."""
    return fused_qkv_target(prefixes, _RENAMES, _QKV, _QKV_SHARD, hidden_size)


class MPNetModel(WdeModel):
    """Embeddings + encoder; returns the last hidden state ``[num_tokens, hidden_size]``."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.embeddings = MPNetEmbeddings(config)
        self.encoder = MPNetEncoder(config)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.encoder(self.embeddings(input_ids, positions))  # MPNet has no token types

    def compile_blocks(self) -> None:
        """torch.compile each layer's MLP + residual + LayerNorm; attention stays eager."""
        compile_each(self.encoder.layer, "mlp")

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        # the checkpoint's pooler (unused by embeddings) finds no parameter and is skipped
        return load_weights_by_name(self, weights, mpnet_target(("mpnet.",), self.config["hidden_size"]))


class MPNetForSequenceClassification(WdeModel):
    """Cross-encoder: MPNet + dense, tanh, out_proj on the first token (<s>) -> ``[num_seqs, num_labels]``."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.mpnet = MPNetModel(config)
        self.classifier = ClassifierHead(config)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.mpnet(input_ids, positions)

    def compute_logits(self, hidden_states: torch.Tensor, meta: PoolingMetadata) -> torch.Tensor:
        return self.classifier(cls_pool(hidden_states, meta))  # [num_seqs, num_labels]

    def compile_blocks(self) -> None:
        self.mpnet.compile_blocks()

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        return load_weights_by_name(self, weights, mpnet_target((), self.config["hidden_size"]))
