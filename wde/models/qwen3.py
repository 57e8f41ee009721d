"""Qwen3 decoder on flat, unpadded batches (Qwen3-Embedding; the Qwen3-Reranker is ``Qwen3ForCausalLM``
with task "score").

Per layer: RMSNorm -> attention (causal, grouped-query heads of the config's ``head_dim``, q/k RMSNorm per
head, then RoPE) -> residual -> RMSNorm -> SwiGLU MLP -> residual; a final RMSNorm. Embeddings pool the last
token (Qwen3-Embedding appends ``<|endoftext|>`` through its tokenizer's post-processor), normalized.
``"is_causal": false`` in config.json makes the attention bidirectional, as transformers' masks read it.

Qwen2 and Mistral (``qwen2.py``, ``mistral.py``) are this decoder with their own attention class
(``Qwen3Model.attention_cls``): what differs is declared on ``Qwen3Attention`` (``qk_norm``,
``projection_biases``, ``sliding_window``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, ClassVar, cast

import torch
import torch.nn.functional as F
from torch import nn

from wde.layers.attention.layer import Attention
from wde.layers.attention.spec import AttentionSpec
from wde.layers.fused import ops as fused
from wde.layers.fused.reference import QKNorm
from wde.layers.pooler.methods import PoolingMetadata, last_pool
from wde.layers.quantization.fp8_activation import Fp8Activation, takes_fp8
from wde.layers.rotary import RotaryEmbedding, apply_rotary
from wde.models.block_compile import compile_each
from wde.models.interface import WdeModel
from wde.models.weight_names import WeightTarget, fused_rows, load_weights_by_name, strip_prefix

_QKV = re.compile(r"^(layers\.\d+\.self_attn)\.(q|k|v)_proj\.(weight|bias)$")
_GATE_UP = re.compile(r"^(layers\.\d+\.mlp)\.(gate|up)_proj\.(weight|bias)$")


def rope_theta(config: dict[str, Any]) -> float:
    """transformers >= 5 saves ``rope_parameters: {rope_type, rope_theta}``; older checkpoints (the published
    Qwen3 ones) a top-level ``rope_theta`` and ``rope_scaling``."""
    rope = config.get("rope_parameters") or {}
    scaling = config.get("rope_scaling") or {}
    rope_type = rope.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
    if rope_type != "default":
        raise ValueError(
            f"RoPE type {rope_type!r} (rope_parameters / rope_scaling in config.json) is not supported; wde "
            "implements default RoPE: remove the scaling or serve the model with transformers"
        )
    return float(rope.get("rope_theta") or config.get("rope_theta") or 10000.0)


class RMSNorm(nn.Module):
    """Qwen3's RMSNorm: normalized in float32, scaled in the input's dtype."""

    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return self.weight * (x.float() * torch.rsqrt(variance + self.eps)).to(x.dtype)


def attention_window(config: dict[str, Any], window: int | None) -> tuple[int, int] | None:
    """transformers' window of ``window`` keys as (left, right) distances: a causal window ends at the
    query itself (``window - 1`` positions before it); with ``is_causal: false`` a key within ``window``
    positions on either side is attended (masking_utils' bidirectional overlay)."""
    if not window:
        return None
    return (int(window) - 1, 0) if config.get("is_causal", True) else (int(window), int(window))


class Qwen3Attention(nn.Module):
    """Grouped-query attention of ``head_dim`` heads with RoPE. The class attributes and classmethods are what
    the decoders built on it (Qwen2, Mistral) override: q/k norms, projection biases, the window rule."""

    qk_norm: ClassVar[bool] = True
    """Each query and key head is RMS-normalized before RoPE (Qwen3; not Qwen2 or Mistral)."""

    @classmethod
    def projection_biases(cls, config: dict[str, Any]) -> tuple[bool, bool]:
        """(q/k/v projections have a bias, o_proj has one): Qwen3 reads ``attention_bias`` for both."""
        bias = bool(config.get("attention_bias", False))
        return bias, bias

    @classmethod
    def sliding_window(cls, config: dict[str, Any], layer_index: int) -> int | None:
        """Keys a layer's window spans, None for full attention: ``sliding_window`` applies only with
        ``use_sliding_window``, to the layers ``layer_types`` names "sliding_attention" (else those from
        ``max_window_layers`` on), as transformers' Qwen2 / Qwen3 configs decide."""
        window = config.get("sliding_window")
        if not config.get("use_sliding_window") or not window:
            return None
        layer_types = config.get("layer_types")
        if layer_types is not None:
            is_sliding = layer_types[layer_index] == "sliding_attention"
        else:
            is_sliding = layer_index >= config.get("max_window_layers", 28)
        return int(window) if is_sliding else None

    def __init__(self, config: dict[str, Any], layer_index: int) -> None:
        super().__init__()
        hidden_size = config["hidden_size"]
        self.num_heads = config["num_attention_heads"]
        self.num_kv_heads = config.get("num_key_value_heads") or self.num_heads
        self.head_size = config.get("head_dim") or hidden_size // self.num_heads
        self.qkv_sizes = (
            self.num_heads * self.head_size,
            self.num_kv_heads * self.head_size,
            self.num_kv_heads * self.head_size,
        )
        qkv_bias, o_bias = self.projection_biases(config)
        self.qkv_proj = nn.Linear(hidden_size, sum(self.qkv_sizes), bias=qkv_bias)  # fused q/k/v (GQA-sized)
        self.o_proj = nn.Linear(self.num_heads * self.head_size, hidden_size, bias=o_bias)
        eps = config.get("rms_norm_eps", 1e-6)
        self.q_norm: nn.Module = RMSNorm(self.head_size, eps) if self.qk_norm else nn.Identity()
        self.k_norm: nn.Module = RMSNorm(self.head_size, eps) if self.qk_norm else nn.Identity()
        self.attn = Attention(
            AttentionSpec(
                num_heads=self.num_heads,
                num_kv_heads=self.num_kv_heads,
                head_size=self.head_size,
                causal=bool(config.get("is_causal", True)),  # "is_causal": false as transformers reads it
                sliding_window=attention_window(config, self.sliding_window(config, layer_index)),
            )
        )

    def forward(self, hidden_states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        num_tokens = hidden_states.shape[0]
        q, k, v = self.qkv_proj(hidden_states).split(self.qkv_sizes, dim=-1)
        q = self.q_norm(q.view(num_tokens, self.num_heads, self.head_size))  # [num_tokens, heads, head_size]
        k = self.k_norm(k.view(num_tokens, self.num_kv_heads, self.head_size))  # [num_tokens, kv_heads, ...]
        v = v.view(num_tokens, self.num_kv_heads, self.head_size)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)  # RoPE
        attn_out = self.attn(q, k, v)  # [num_tokens, num_heads, head_size]
        return self.o_proj(attn_out.reshape(num_tokens, -1))  # [num_tokens, hidden_size]

    def forward_fused(
        self, hidden_states: torch.Tensor | Fp8Activation, cos: torch.Tensor, sin: torch.Tensor
    ) -> torch.Tensor:
        """``forward`` with q/k norms and RoPE in one kernel, in place on the q/k/v projection
        (``hidden_states`` comes quantized where ``qkv_proj`` is fp8)."""
        qkv = self.qkv_proj(hidden_states)  # [num_tokens, (num_heads + 2 * num_kv_heads) * head_size]
        norm: QKNorm | None = None
        if isinstance(self.q_norm, RMSNorm) and isinstance(self.k_norm, RMSNorm):
            norm = (self.q_norm.weight, self.k_norm.weight, self.q_norm.eps, "llama")
        q, k, v = fused.qk_norm_rotary(qkv, self.num_heads, self.num_kv_heads, cos, sin, norm)
        attn_out = self.attn(q, k, v)  # [num_tokens, num_heads, head_size]
        return self.o_proj(attn_out.reshape(qkv.shape[0], -1))  # [num_tokens, hidden_size]


class Qwen3MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x)), gate and up fused into one projection; biases with ``mlp_bias``
    (Llama-style configs: EuroBERT)."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        hidden_size, intermediate_size = config["hidden_size"], config["intermediate_size"]
        if config.get("hidden_act", "silu") != "silu":
            raise ValueError(
                f"hidden_act {config['hidden_act']!r} is not supported by wde's decoder MLP (only silu)"
            )
        self.intermediate_size = intermediate_size
        bias = bool(config.get("mlp_bias", False))
        self.gate_up_proj = nn.Linear(hidden_size, 2 * intermediate_size, bias=bias)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split(self.intermediate_size, dim=-1)  # [num_tokens, intermediate] x2
        return self.down_proj(F.silu(gate) * up)

    def forward_fused(self, x: torch.Tensor | Fp8Activation) -> torch.Tensor:
        products = fused.act_and_mul(self.gate_up_proj(x), "silu", quantize=takes_fp8(self.down_proj))
        return self.down_proj(products)  # [num_tokens, hidden_size]


class Qwen3DecoderLayer(nn.Module):
    def __init__(
        self, config: dict[str, Any], layer_index: int, attention_cls: type[Qwen3Attention] = Qwen3Attention
    ) -> None:
        super().__init__()
        eps = config.get("rms_norm_eps", 1e-6)
        self.input_layernorm = RMSNorm(config["hidden_size"], eps)
        self.self_attn = attention_cls(config, layer_index)
        self.post_attention_layernorm = RMSNorm(config["hidden_size"], eps)
        self.mlp = Qwen3MLP(config)

    def forward(self, hidden_states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        hidden_states = hidden_states + self.self_attn(self.input_layernorm(hidden_states), cos, sin)
        return self.mlp_block(hidden_states)

    def mlp_block(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """RMSNorm -> SwiGLU -> residual (token-wise: what torch.compile fuses)."""
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))

    def forward_fused(
        self,
        normed: torch.Tensor | Fp8Activation,
        residual: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer after its input norm, with the fused kernels: (the MLP's output, the residual stream
        before it); the next layer's input norm (or the final norm) adds the two (``Qwen3Model``)."""
        attn_out = self.self_attn.forward_fused(normed, cos, sin)
        norm = self.post_attention_layernorm
        quantize = takes_fp8(self.mlp.gate_up_proj)
        normed, residual = fused.add_rms_norm(
            attn_out, residual, norm.weight, norm.eps, "llama", None, quantize
        )
        return self.mlp.forward_fused(normed), residual


class Qwen3Model(WdeModel):
    """Token embeddings + decoder layers + final norm; returns the last hidden state [num_tokens, hidden]."""

    attention_cls: ClassVar[type[Qwen3Attention]] = Qwen3Attention
    """Each layer's attention: what a decoder built on this one (Qwen2, Mistral) replaces."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config["vocab_size"], config["hidden_size"])
        num_layers = config["num_hidden_layers"]
        layers = [Qwen3DecoderLayer(config, i, self.attention_cls) for i in range(num_layers)]
        self.layers = nn.ModuleList(layers)
        self.norm = RMSNorm(config["hidden_size"], config.get("rms_norm_eps", 1e-6))
        self.rotary_emb = RotaryEmbedding(layers[0].self_attn.head_size, rope_theta(config))
        self.qkv_sizes = layers[0].self_attn.qkv_sizes  # every layer's, to split the checkpoint's q/k/v

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        hidden_states = self.embed_tokens(input_ids)  # [num_tokens, hidden_size]
        # cos, sin [num_tokens, 1, head_size]: once per forward, shared by every layer
        cos, sin = self.rotary_emb.cos_sin(positions, hidden_states.dtype)
        if fused.fused_kernels_enabled(hidden_states):
            return self._forward_fused(hidden_states, cos, sin)
        for layer in self.layers:
            hidden_states = layer(hidden_states, cos, sin)
        return self.norm(hidden_states)

    def _forward_fused(
        self, hidden_states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> torch.Tensor:
        """The layers with the fused kernels (CUDA): each residual add done with the next norm."""
        residual = torch.zeros_like(hidden_states)  # [num_tokens, hidden_size]
        for layer in cast(list[Qwen3DecoderLayer], self.layers):
            norm = layer.input_layernorm
            quantize = takes_fp8(layer.self_attn.qkv_proj)
            normed, residual = fused.add_rms_norm(
                hidden_states, residual, norm.weight, norm.eps, "llama", None, quantize
            )
            hidden_states, residual = layer.forward_fused(normed, residual, cos, sin)
        normed, _ = fused.add_rms_norm(hidden_states, residual, self.norm.weight, self.norm.eps, "llama")
        assert isinstance(normed, torch.Tensor)  # not asked to quantize: the 16-bit output
        return normed

    def compile_blocks(self) -> None:
        """torch.compile each layer's MLP block with dynamic token counts; attention stays eager."""
        compile_each(self.layers, "mlp_block")

    def weight_target(self, name: str) -> WeightTarget | None:
        """Checkpoint name (``model.`` prefix stripped) -> our parameter and rows; None skips it."""
        if name == "lm_head.weight":
            return None  # the language-model head: unused for embeddings
        name = strip_prefix(name, ("model.",))
        match = _QKV.match(name)
        if match:
            shard = "qkv".index(match[2])
            return f"{match[1]}.qkv_proj.{match[3]}", fused_rows(shard, self.qkv_sizes)
        match = _GATE_UP.match(name)
        if match:
            size = self.config["intermediate_size"]
            return f"{match[1]}.gate_up_proj.{match[3]}", fused_rows(
                ("gate", "up").index(match[2]), (size, size)
            )
        return name, None

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        return load_weights_by_name(self, weights, self.weight_target)


class Qwen3ForCausalLM(Qwen3Model):
    """A ``Qwen3ForCausalLM`` checkpoint (``model.`` prefixed, with an ``lm_head`` or tied embeddings).

    Task "embed" (the default: Qwen3-Embedding) ignores the lm_head. Task "score" (Qwen3-Reranker) formats
    each (query, document) pair with its registry entry's ``LlmReranker`` (``wde/model_folder/
    llm_reranker.py``) and scores it with the last position's logits of its score tokens: sigmoid(logit("yes")
    - logit("no")) = softmax over ("no", "yes"), the model card's score. Only those two rows of the lm_head
    are kept (``score_token_ids``, resolved by ``read_model_info``).
    """

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.score_token_ids: list[int] | None = config.get("score_token_ids")
        if self.score_token_ids is not None:
            self.score_head = nn.Linear(config["hidden_size"], len(self.score_token_ids), bias=False)

    def compute_logits(self, hidden_states: torch.Tensor, meta: PoolingMetadata) -> torch.Tensor:
        logits = self.score_head(last_pool(hidden_states, meta))  # [num_seqs, 2]: ("no", "yes")
        return (logits[:, 1] - logits[:, 0]).unsqueeze(1)  # [num_seqs, 1]; sigmoid -> P("yes")

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        return load_weights_by_name(self, self._with_score_rows(weights), self.weight_target)

    def weight_target(self, name: str) -> WeightTarget | None:
        if name == "score_head.weight":
            return name, None
        return super().weight_target(name)

    def _with_score_rows(
        self, weights: Iterable[tuple[str, torch.Tensor]]
    ) -> Iterable[tuple[str, torch.Tensor]]:
        """The lm_head's (or, tied, the embedding's) rows of the score tokens, as ``score_head.weight``."""
        ids = self.score_token_ids
        tied = bool(self.config.get("tie_word_embeddings", False))
        for name, tensor in weights:
            if ids is not None and (
                name == "lm_head.weight" or (tied and name.endswith("embed_tokens.weight"))
            ):
                yield "score_head.weight", tensor[ids]
            yield name, tensor
