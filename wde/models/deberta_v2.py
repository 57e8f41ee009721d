"""DeBERTa-v2 / v3 (``DebertaV2Model`` embeddings, ``DebertaV2ForSequenceClassification`` cross-encoders such
as mxbai-rerank-v1): BERT-shaped post-norm blocks whose attention is *disentangled*.

Each score adds three terms, all divided by ``sqrt(head_size * (1 + len(pos_att_type)))``:

- content to content ``q_i . k_j``;
- content to position (``c2p``) ``q_i . pos_k[bucket(i - j)]``;
- position to content (``p2c``) ``k_j . pos_q[bucket(j - i)]``,

where ``pos_k`` / ``pos_q`` are the shared relative embeddings (``encoder.rel_embeddings``, optionally
LayerNorm-ed: ``norm_rel_ebd``) projected by each layer's key / query projections (``share_att_key``) or by
its own ``pos_key_proj`` / ``pos_query_proj``, and ``bucket`` is DeBERTa's log bucketing of distances
(``position_buckets``, ``max_relative_positions``), clamped to the table.

Why this file computes its attention itself instead of through an ``Attention`` layer and the runner's
backend: the c2p and p2c terms depend on each token's query / key *content*, so they are not a bias shared by
every sequence (as MPNet's is) that a backend could add. The attention runs here, on the batch padded to
``[num_seqs, max_seqlen, ...]`` with a key padding mask, and is scattered back to the flat layout. Every
attention backend the runner binds therefore gives the same result; DeBERTa pays max_seqlen x num_seqs for
its attention whatever the backend charges.

``conv_kernel_size`` (DeBERTa-v2 xlarge / xxlarge) adds a convolution after the first layer, run on the same
padded layout; even kernel sizes are refused (transformers' padding would shorten the sequence).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from wde.config import num_labels
from wde.layers.activation import get_act_fn
from wde.layers.forward_context import get_forward_context
from wde.layers.pooler.methods import PoolingMetadata, cls_pool
from wde.models.bert import BertSelfOutput
from wde.models.block_compile import compile_each
from wde.models.interface import WdeModel
from wde.models.weight_names import load_weights_by_name, strip_prefix


def pos_att_types(config: dict[str, Any]) -> list[str]:
    """``pos_att_type`` as a list: configs store ``["p2c", "c2p"]`` or the older ``"p2c|c2p"``."""
    value = config.get("pos_att_type") or []
    if isinstance(value, str):
        value = [part.strip() for part in value.lower().split("|")]
    unknown = set(value) - {"c2p", "p2c"}
    if unknown:
        raise ValueError(f"pos_att_type {value} has {sorted(unknown)}; DeBERTa-v2 knows only 'c2p' and 'p2c'")
    return list(value)


def make_log_bucket_position(relative_pos: torch.Tensor, bucket_size: int, max_position: int) -> torch.Tensor:
    """transformers' bucketing of ``query - key`` distances: exact below ``bucket_size // 2``, logarithmic up
    to ``max_position``; the sign is kept. Same float ops as transformers, so the buckets match exactly."""
    sign = torch.sign(relative_pos)
    mid = bucket_size // 2
    abs_pos = torch.where(
        (relative_pos < mid) & (relative_pos > -mid),
        torch.tensor(mid - 1).type_as(relative_pos),
        torch.abs(relative_pos),
    )
    log_scale = torch.log(torch.tensor((max_position - 1) / mid))
    log_pos = torch.ceil(torch.log(abs_pos / mid) / log_scale * (mid - 1)) + mid
    return torch.where(abs_pos <= mid, relative_pos.type_as(log_pos), log_pos * sign)


@dataclass
class PaddedLayout:
    """Where the flat batch's tokens sit in ``[num_seqs, max_seqlen]``; built once per batch."""

    num_seqs: int
    max_seqlen: int
    flat_index: torch.Tensor  # [num_tokens] int64: seq * max_seqlen + position
    key_mask: torch.Tensor  # [num_seqs, max_seqlen] bool: a real token

    @classmethod
    def build(cls, positions: torch.Tensor) -> PaddedLayout:
        metadata = get_forward_context().attn_metadata
        if metadata.num_seqs == 0:
            raise RuntimeError(
                "DeBERTa-v2 pads its attention by the batch's sequence lengths, known only on the host, so "
                "its forward cannot be captured in a CUDA graph: pass --cuda-graph-mode none"
            )
        cu_seqlens = metadata.cu_seqlens.to(torch.int64)
        seq_lens = cu_seqlens[1:] - cu_seqlens[:-1]  # [num_seqs]
        seq_ids = torch.repeat_interleave(
            torch.arange(metadata.num_seqs, device=positions.device), seq_lens, output_size=positions.shape[0]
        )
        flat_index = seq_ids * metadata.max_seqlen + positions.to(torch.int64)
        slots = torch.arange(metadata.max_seqlen, device=positions.device)
        return cls(metadata.num_seqs, metadata.max_seqlen, flat_index, slots[None, :] < seq_lens[:, None])

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """[num_tokens, *rest] -> [num_seqs, max_seqlen, *rest], zeros past each sequence's end."""
        padded = x.new_zeros(self.num_seqs * self.max_seqlen, *x.shape[1:])
        padded.index_copy_(0, self.flat_index, x)
        return padded.view(self.num_seqs, self.max_seqlen, *x.shape[1:])

    def unpad(self, x: torch.Tensor) -> torch.Tensor:
        """[num_seqs, max_seqlen, *rest] -> [num_tokens, *rest]"""
        return x.reshape(self.num_seqs * self.max_seqlen, *x.shape[2:]).index_select(0, self.flat_index)


class DebertaV2Embeddings(nn.Module):
    """Word (+ absolute position when ``position_biased_input``) (+ token type when ``type_vocab_size > 0``)
    embeddings, an optional projection from ``embedding_size``, LayerNorm."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        hidden_size = config["hidden_size"]
        embedding_size = config.get("embedding_size") or hidden_size
        self.word_embeddings = nn.Embedding(config["vocab_size"], embedding_size)
        self.position_embeddings = None
        if config.get("position_biased_input", True):
            self.position_embeddings = nn.Embedding(
                config.get("max_position_embeddings", 512), embedding_size
            )
        self.token_type_embeddings = None
        if int(config.get("type_vocab_size", 0)) > 0:
            self.token_type_embeddings = nn.Embedding(config["type_vocab_size"], embedding_size)
        self.embed_proj = None
        if embedding_size != hidden_size:
            self.embed_proj = nn.Linear(embedding_size, hidden_size, bias=False)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=config.get("layer_norm_eps", 1e-7))

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, token_type_ids: torch.Tensor | None
    ) -> torch.Tensor:
        embeddings = self.word_embeddings(input_ids)  # [num_tokens, embedding_size]
        if self.position_embeddings is not None:
            embeddings = embeddings + self.position_embeddings(positions)
        if self.token_type_embeddings is not None:
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(input_ids)
            embeddings = embeddings + self.token_type_embeddings(token_type_ids)
        if self.embed_proj is not None:
            embeddings = self.embed_proj(embeddings)  # [num_tokens, hidden_size]
        return self.LayerNorm(embeddings)


class RelativePositions(nn.Module):
    """The relative-position state shared by every layer: the (normalized) relative embeddings and the
    bucketed ``query - key`` distance of every pair of slots."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        self.max_relative_positions = int(config.get("max_relative_positions", -1))
        if self.max_relative_positions < 1:
            self.max_relative_positions = int(config.get("max_position_embeddings", 512))
        self.position_buckets = int(config.get("position_buckets", -1))
        # att_span: how far each direction the table reaches; it holds 2 * att_span rows
        self.att_span = self.position_buckets if self.position_buckets > 0 else self.max_relative_positions
        self.rel_embeddings = nn.Embedding(2 * self.att_span, config["hidden_size"])
        norm_rel_ebd = [part.strip() for part in str(config.get("norm_rel_ebd", "none")).lower().split("|")]
        self.LayerNorm = None
        if "layer_norm" in norm_rel_ebd:
            self.LayerNorm = nn.LayerNorm(config["hidden_size"], eps=config.get("layer_norm_eps", 1e-7))

    def embeddings(self) -> torch.Tensor:
        """[2 * att_span, hidden_size]"""
        weight = self.rel_embeddings.weight
        return weight if self.LayerNorm is None else self.LayerNorm(weight)

    def relative_pos(self, max_seqlen: int, device: torch.device) -> torch.Tensor:
        """[max_seqlen, max_seqlen] int64: bucket of (query slot - key slot)."""
        slots = torch.arange(max_seqlen, dtype=torch.long, device=device)
        relative_pos = slots[:, None] - slots[None, :]
        if self.position_buckets > 0 and self.max_relative_positions > 0:
            relative_pos = make_log_bucket_position(
                relative_pos, self.position_buckets, self.max_relative_positions
            )
        return relative_pos.to(torch.long)


class DisentangledSelfAttention(nn.Module):
    """q, k, v projections and the c2c + c2p + p2c scores, on the padded layout."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        hidden_size = config["hidden_size"]
        self.num_heads = config["num_attention_heads"]
        self.head_size = int(config.get("attention_head_size") or hidden_size // self.num_heads)
        all_head_size = self.num_heads * self.head_size
        self.query_proj = nn.Linear(hidden_size, all_head_size)
        self.key_proj = nn.Linear(hidden_size, all_head_size)
        self.value_proj = nn.Linear(hidden_size, all_head_size)
        self.pos_att_type = pos_att_types(config)
        self.relative_attention = bool(config.get("relative_attention", False))
        self.share_att_key = bool(config.get("share_att_key", False))
        if self.relative_attention and not self.share_att_key:
            if "c2p" in self.pos_att_type:
                self.pos_key_proj = nn.Linear(hidden_size, all_head_size)
            if "p2c" in self.pos_att_type:
                self.pos_query_proj = nn.Linear(hidden_size, all_head_size)
        # transformers counts c2p / p2c in the scale even without relative_attention
        self.scale = 1.0 / math.sqrt(self.head_size * (1 + len(self.pos_att_type)))

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        """[..., L, num_heads * head_size] -> [..., num_heads, L, head_size]"""
        return x.unflatten(-1, (self.num_heads, self.head_size)).transpose(-3, -2)

    def forward(
        self,
        hidden_states: torch.Tensor,
        layout: PaddedLayout,
        rel_embeddings: torch.Tensor | None,
        relative_pos: torch.Tensor | None,
        att_span: int,
    ) -> torch.Tensor:
        padded = layout.pad(hidden_states)  # [num_seqs, L, hidden_size]
        q = self.heads(self.query_proj(padded))  # [num_seqs, num_heads, L, head_size]
        k = self.heads(self.key_proj(padded))
        v = self.heads(self.value_proj(padded))
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.scale  # [num_seqs, num_heads, L, L]
        if self.relative_attention and rel_embeddings is not None and relative_pos is not None:
            scores = scores + self.relative_scores(q, k, rel_embeddings, relative_pos, att_span)
        scores = scores.masked_fill(~layout.key_mask[:, None, None, :], torch.finfo(scores.dtype).min)
        context = torch.matmul(scores.softmax(dim=-1), v)  # [num_seqs, num_heads, L, head_size]
        context = context.transpose(1, 2).flatten(2)  # [num_seqs, L, num_heads * head_size]
        return layout.unpad(context)  # [num_tokens, num_heads * head_size]

    def relative_scores(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        rel_embeddings: torch.Tensor,
        relative_pos: torch.Tensor,
        att_span: int,
    ) -> torch.Tensor:
        """c2p + p2c: [num_seqs, num_heads, L, L]. ``relative_pos`` [L, L] holds bucket(i - j)."""
        num_seqs, num_heads, max_seqlen, _ = q.shape
        index_shape = (num_seqs, num_heads, max_seqlen, max_seqlen)
        rel_embeddings = rel_embeddings[: 2 * att_span]  # [2 * att_span, hidden_size]
        score = torch.zeros((), dtype=q.dtype, device=q.device)
        if "c2p" in self.pos_att_type:
            key_proj = self.key_proj if self.share_att_key else self.pos_key_proj
            pos_key = self.heads(key_proj(rel_embeddings))  # [num_heads, 2 * att_span, head_size]
            c2p = torch.matmul(q, pos_key.transpose(-1, -2))  # [num_seqs, num_heads, L, 2 * att_span]
            c2p_index = torch.clamp(relative_pos + att_span, 0, 2 * att_span - 1)  # [L, L]
            score = score + torch.gather(c2p, -1, c2p_index.expand(index_shape)) * self.scale
        if "p2c" in self.pos_att_type:
            query_proj = self.query_proj if self.share_att_key else self.pos_query_proj
            pos_query = self.heads(query_proj(rel_embeddings))  # [num_heads, 2 * att_span, head_size]
            p2c = torch.matmul(k, pos_query.transpose(-1, -2))  # [num_seqs, num_heads, L(key), 2 * att_span]
            p2c_index = torch.clamp(-relative_pos + att_span, 0, 2 * att_span - 1)  # [L(key), L(query)]
            # row j, column i: k_j . pos_q[bucket(j - i)]; transposed to [query, key]
            score = (
                score + torch.gather(p2c, -1, p2c_index.expand(index_shape)).transpose(-1, -2) * self.scale
            )
        return score


class DebertaV2Attention(nn.Module):
    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        hidden_size = config["hidden_size"]
        self.self = DisentangledSelfAttention(config)
        all_head_size = self.self.num_heads * self.self.head_size
        self.output = BertSelfOutput(all_head_size, hidden_size, config.get("layer_norm_eps", 1e-7))

    def forward(
        self,
        hidden_states: torch.Tensor,
        layout: PaddedLayout,
        rel_embeddings: torch.Tensor | None,
        relative_pos: torch.Tensor | None,
        att_span: int,
    ) -> torch.Tensor:
        context = self.self(hidden_states, layout, rel_embeddings, relative_pos, att_span)
        return self.output(context, hidden_states)  # [num_tokens, hidden_size]


class DebertaV2Layer(nn.Module):
    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        hidden_size, intermediate_size = config["hidden_size"], config["intermediate_size"]
        self.attention = DebertaV2Attention(config)
        self.intermediate = nn.Linear(hidden_size, intermediate_size)
        self.act_fn = get_act_fn(config.get("hidden_act", "gelu"))
        self.output = BertSelfOutput(intermediate_size, hidden_size, config.get("layer_norm_eps", 1e-7))

    def forward(
        self,
        hidden_states: torch.Tensor,
        layout: PaddedLayout,
        rel_embeddings: torch.Tensor | None,
        relative_pos: torch.Tensor | None,
        att_span: int,
    ) -> torch.Tensor:
        attn_out = self.attention(hidden_states, layout, rel_embeddings, relative_pos, att_span)
        return self.mlp(attn_out)  # [num_tokens, hidden_size]

    def mlp(self, attn_out: torch.Tensor) -> torch.Tensor:
        mlp_hidden = self.act_fn(self.intermediate(attn_out))  # [num_tokens, intermediate_size]
        return self.output(mlp_hidden, attn_out)  # [num_tokens, hidden_size]


class ConvLayer(nn.Module):
    """DeBERTa-v2's convolution over the embeddings, added to the first layer's output, then LayerNorm."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        hidden_size = config["hidden_size"]
        kernel_size = int(config.get("conv_kernel_size", 3))
        if kernel_size % 2 == 0:
            raise ValueError(
                f"conv_kernel_size {kernel_size} is even; transformers' DeBERTa-v2 convolution keeps the "
                "sequence length only for odd kernel sizes: fix config.json"
            )
        self.conv = nn.Conv1d(
            hidden_size,
            hidden_size,
            kernel_size,
            padding=(kernel_size - 1) // 2,
            groups=int(config.get("conv_groups", 1)),
        )
        self.act_fn = get_act_fn(config.get("conv_act", "tanh"))
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=config.get("layer_norm_eps", 1e-7))

    def forward(self, embeddings: torch.Tensor, residual: torch.Tensor, layout: PaddedLayout) -> torch.Tensor:
        padded = layout.pad(embeddings)  # [num_seqs, L, hidden_size]; zeros past each end, as transformers'
        out = self.conv(padded.transpose(1, 2)).transpose(1, 2)  # [num_seqs, L, hidden_size]
        out = self.act_fn(layout.unpad(out))  # [num_tokens, hidden_size]
        return self.LayerNorm(residual + out)


class DebertaV2Encoder(nn.Module):
    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        self.layer = nn.ModuleList(DebertaV2Layer(config) for _ in range(config["num_hidden_layers"]))
        self.relative = RelativePositions(config) if config.get("relative_attention", False) else None
        self.conv = ConvLayer(config) if int(config.get("conv_kernel_size", 0) or 0) > 0 else None

    def forward(self, embeddings: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        layout = PaddedLayout.build(positions)  # once per batch, every layer
        rel_embeddings = relative_pos = None
        att_span = 0
        if self.relative is not None:
            rel_embeddings = self.relative.embeddings()  # [2 * att_span, hidden_size]
            relative_pos = self.relative.relative_pos(layout.max_seqlen, embeddings.device)  # [L, L]
            att_span = self.relative.att_span
        hidden_states = embeddings
        for index, layer in enumerate(self.layer):
            hidden_states = layer(hidden_states, layout, rel_embeddings, relative_pos, att_span)
            if index == 0 and self.conv is not None:
                hidden_states = self.conv(embeddings, hidden_states, layout)
        return hidden_states  # [num_tokens, hidden_size]


def _rename(name: str) -> str:
    """transformers' names -> ours: BERT's output blocks, the relative state in one module."""
    name = name.replace(".intermediate.dense.", ".intermediate.")
    name = name.replace("encoder.rel_embeddings.", "encoder.relative.rel_embeddings.")
    return name.replace("encoder.LayerNorm.", "encoder.relative.LayerNorm.")


class DebertaV2Model(WdeModel):
    """Embeddings + encoder; returns the last hidden state ``[num_tokens, hidden_size]``."""

    # the padded attention layout is built from host-side sequence lengths: no CUDA graph replay
    supports_cuda_graphs = False

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.embeddings = DebertaV2Embeddings(config)
        self.encoder = DebertaV2Encoder(config)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.encoder(self.embeddings(input_ids, positions, token_type_ids), positions)

    def compile_blocks(self) -> None:
        """torch.compile each layer's MLP + residual + LayerNorm; attention stays eager."""
        compile_each(self.encoder.layer, "mlp")

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        # a checkpoint's LM head (or unused position_embeddings) finds no parameter and is skipped
        return load_weights_by_name(
            self, weights, lambda name: (_rename(strip_prefix(name, ("deberta.",))), None)
        )


class ContextPooler(nn.Module):
    """transformers' ContextPooler: dense + ``pooler_hidden_act`` on the first token (dropout ignored)."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        pooler_hidden_size = int(config.get("pooler_hidden_size") or config["hidden_size"])
        self.dense = nn.Linear(pooler_hidden_size, pooler_hidden_size)
        self.act_fn = get_act_fn(config.get("pooler_hidden_act", "gelu"))

    def forward(self, first_token_states: torch.Tensor) -> torch.Tensor:
        return self.act_fn(self.dense(first_token_states))  # [num_seqs, pooler_hidden_size]


class DebertaV2ForSequenceClassification(WdeModel):
    """Cross-encoder: DeBERTa-v2 + ContextPooler + classifier on the first token ([CLS])
    -> ``[num_seqs, num_labels]``."""

    supports_cuda_graphs = False

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.deberta = DebertaV2Model(config)
        self.pooler = ContextPooler(config)
        self.classifier = nn.Linear(config["hidden_size"], num_labels(config))

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.deberta(input_ids, positions, token_type_ids)

    def compute_logits(self, hidden_states: torch.Tensor, meta: PoolingMetadata) -> torch.Tensor:
        return self.classifier(self.pooler(cls_pool(hidden_states, meta)))  # [num_seqs, num_labels]

    def compile_blocks(self) -> None:
        self.deberta.compile_blocks()

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        return load_weights_by_name(self, weights, lambda name: (_rename(name), None))
