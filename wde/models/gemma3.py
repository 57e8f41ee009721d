"""Gemma3 text encoder (EmbeddingGemma: ``Gemma3TextModel`` with ``use_bidirectional_attention``) on flat,
unpadded batches.

As transformers' ``modeling_gemma3.py``: embeddings scaled by sqrt(hidden_size) in the model's dtype; per
layer a pre- and post-attention RMSNorm and a pre- and post-MLP RMSNorm around each residual branch
("sandwich" norms); Gemma's RMSNorm scales by (1 + weight), in float32; q/k RMSNorm per head before RoPE;
grouped-query heads of the config's ``head_dim``; attention scale ``query_pre_attn_scalar ** -0.5``; a gated
MLP (``gelu_pytorch_tanh`` on the gate); RoPE with one base for sliding ("local") layers and another for
full ("global") layers; a final RMSNorm.

Sliding layers: with ``use_bidirectional_attention`` transformers keeps ``sliding_window // 2 + 1`` of
config.json's value and lets a query see the keys at distance ``< that`` on either side, i.e. at most
``sliding_window // 2`` before and after: ``AttentionSpec(sliding_window=(w // 2, w // 2))``. A causal
Gemma3 sees the ``sliding_window - 1`` keys before it: ``(w - 1, 0)``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import torch
from torch import nn

from wde.layers.activation import TANH_GELU_NAMES, get_act_fn
from wde.layers.attention.layer import Attention
from wde.layers.attention.spec import AttentionSpec
from wde.layers.fused import ops as fused
from wde.layers.fused.reference import QKNorm
from wde.layers.quantization.fp8_activation import Fp8Activation, takes_fp8
from wde.layers.rotary import RotaryEmbedding, apply_rotary
from wde.models.block_compile import compile_each
from wde.models.interface import WdeModel
from wde.models.weight_names import WeightTarget, fused_rows, load_weights_by_name, strip_prefix

LAYER_TYPES = ("sliding_attention", "full_attention")
# transformers' defaults (configuration_gemma3.py) for configs that leave a key out
DEFAULT_ROPE_THETA = {"full_attention": 1_000_000.0, "sliding_attention": 10_000.0}
DEFAULT_SLIDING_WINDOW_PATTERN = 6  # every 6th layer is a full one


def layer_types(config: dict[str, Any]) -> list[str]:
    types = config.get("layer_types")
    if types is None:
        pattern = int(config.get("sliding_window_pattern", DEFAULT_SLIDING_WINDOW_PATTERN))
        types = [
            "sliding_attention" if (i + 1) % pattern else "full_attention"
            for i in range(config["num_hidden_layers"])
        ]
    unknown = sorted(set(types) - set(LAYER_TYPES))
    if unknown or len(types) != config["num_hidden_layers"]:
        raise ValueError(
            f"config.json layer_types {types} must name one of {LAYER_TYPES} for each of the "
            f"{config['num_hidden_layers']} layers"
        )
    return list(types)


def rope_theta(config: dict[str, Any], layer_type: str) -> float:
    """The RoPE base of a layer type: ``rope_parameters[layer_type]`` (transformers >= 5), else the older
    ``rope_theta`` (global) / ``rope_local_base_freq`` (local) keys."""
    parameters = (config.get("rope_parameters") or {}).get(layer_type)
    if parameters is None:
        scaling = config.get("rope_scaling") if layer_type == "full_attention" else None
        legacy_key = "rope_theta" if layer_type == "full_attention" else "rope_local_base_freq"
        parameters = {**(scaling or {}), "rope_theta": config.get(legacy_key, DEFAULT_ROPE_THETA[layer_type])}
    rope_type = parameters.get("rope_type", parameters.get("type", "default"))
    if rope_type != "default":
        raise ValueError(
            f"config.json asks for rope_type {rope_type!r} on {layer_type} layers; wde's Gemma3 supports "
            "'default' RoPE only (as EmbeddingGemma uses)"
        )
    return float(parameters.get("rope_theta", DEFAULT_ROPE_THETA[layer_type]))


def attention_window(config: dict[str, Any], layer_type: str) -> tuple[int, int] | None:
    """(left, right) keys a query sees on a layer, as transformers' masks for Gemma3 define them."""
    if layer_type == "full_attention":
        return None
    window = int(config["sliding_window"])
    if config.get("use_bidirectional_attention"):
        return (window // 2, window // 2)
    return (window - 1, 0)


class Gemma3RMSNorm(nn.Module):
    """``x / rms(x) * (1 + weight)``, computed in float32 and cast back (Gemma's, not Llama's, order)."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_float = x.float()
        normed = x_float * torch.rsqrt(x_float.pow(2).mean(-1, keepdim=True) + self.eps)
        return (normed * (1.0 + self.weight.float())).type_as(x)


class Gemma3Attention(nn.Module):
    def __init__(self, config: dict[str, Any], layer_type: str) -> None:
        super().__init__()
        hidden_size = config["hidden_size"]
        self.num_heads = config["num_attention_heads"]
        self.num_kv_heads = config.get("num_key_value_heads", self.num_heads)
        self.head_size = config.get("head_dim") or hidden_size // self.num_heads
        if config.get("attn_logit_softcapping") is not None:
            raise ValueError(
                "config.json sets attn_logit_softcapping, which wde's attention backends do not apply; "
                "Gemma3 models leave it null"
            )
        bias = bool(config.get("attention_bias", False))
        eps = config.get("rms_norm_eps", 1e-6)
        # fused q, k, v: [num_heads + 2 * num_kv_heads] * head_size rows
        self.qkv_sizes = (self.num_heads * self.head_size, *(2 * (self.num_kv_heads * self.head_size,)))
        self.qkv_proj = nn.Linear(hidden_size, sum(self.qkv_sizes), bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_size, hidden_size, bias=bias)
        self.q_norm = Gemma3RMSNorm(self.head_size, eps)
        self.k_norm = Gemma3RMSNorm(self.head_size, eps)
        spec = AttentionSpec(
            num_heads=self.num_heads,
            head_size=self.head_size,
            num_kv_heads=self.num_kv_heads,
            scale=float(config.get("query_pre_attn_scalar", 256)) ** -0.5,
            causal=not config.get("use_bidirectional_attention", False),
            sliding_window=attention_window(config, layer_type),
        )
        self.attn = Attention(spec)

    def forward(self, hidden_states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        num_tokens = hidden_states.shape[0]
        q, k, v = self.qkv_proj(hidden_states).split(self.qkv_sizes, dim=-1)
        # q [num_tokens, num_heads, head_size]; k, v [num_tokens, num_kv_heads, head_size]
        q = self.q_norm(q.view(num_tokens, self.num_heads, self.head_size))
        k = self.k_norm(k.view(num_tokens, self.num_kv_heads, self.head_size))
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
        norm: QKNorm = (self.q_norm.weight, self.k_norm.weight, self.q_norm.eps, "gemma")
        q, k, v = fused.qk_norm_rotary(qkv, self.num_heads, self.num_kv_heads, cos, sin, norm)
        attn_out = self.attn(q, k, v)  # [num_tokens, num_heads, head_size]
        return self.o_proj(attn_out.reshape(qkv.shape[0], -1))  # [num_tokens, hidden_size]


class Gemma3MLP(nn.Module):
    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        hidden_size, intermediate_size = config["hidden_size"], config["intermediate_size"]
        self.intermediate_size = intermediate_size
        self.gate_up_proj = nn.Linear(hidden_size, 2 * intermediate_size, bias=False)  # fused gate, up
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)
        self.activation = config.get("hidden_activation") or "gelu_pytorch_tanh"
        self.act_fn = get_act_fn(self.activation)

    def forward(self, x: torch.Tensor | Fp8Activation) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split(self.intermediate_size, dim=-1)  # [num_tokens, intermediate]
        return self.down_proj(self.act_fn(gate) * up)  # [num_tokens, hidden_size]

    def forward_fused(self, x: torch.Tensor | Fp8Activation) -> torch.Tensor:
        if self.activation not in TANH_GELU_NAMES:  # the kernel's is GELU's tanh approximation
            return self.forward(x)
        gate_up = self.gate_up_proj(x)  # [num_tokens, 2 * intermediate]
        products = fused.act_and_mul(gate_up, "gelu_tanh", quantize=takes_fp8(self.down_proj))
        return self.down_proj(products)  # [num_tokens, hidden_size]


class Gemma3DecoderLayer(nn.Module):
    def __init__(self, config: dict[str, Any], layer_type: str) -> None:
        super().__init__()
        hidden_size, eps = config["hidden_size"], config.get("rms_norm_eps", 1e-6)
        self.layer_type = layer_type
        self.self_attn = Gemma3Attention(config, layer_type)
        self.mlp = Gemma3MLP(config)
        self.input_layernorm = Gemma3RMSNorm(hidden_size, eps)
        self.post_attention_layernorm = Gemma3RMSNorm(hidden_size, eps)
        self.pre_feedforward_layernorm = Gemma3RMSNorm(hidden_size, eps)
        self.post_feedforward_layernorm = Gemma3RMSNorm(hidden_size, eps)

    def forward(self, hidden_states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        attn_out = self.self_attn(self.input_layernorm(hidden_states), cos, sin)
        hidden_states = hidden_states + self.post_attention_layernorm(attn_out)
        return self.feed_forward(hidden_states)

    def feed_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """pre-norm -> MLP -> post-norm -> residual add (what torch.compile fuses)."""
        mlp_out = self.mlp(self.pre_feedforward_layernorm(hidden_states))
        return hidden_states + self.post_feedforward_layernorm(mlp_out)  # [num_tokens, hidden_size]

    def forward_fused(
        self,
        normed: torch.Tensor | Fp8Activation,
        residual: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer after its input norm, with the fused kernels: (the MLP's output before its post-norm,
        the residual stream before it); the next layer's input norm (or the final norm) applies the
        post-norm and adds the two (``Gemma3TextModel``)."""
        attn_out = self.self_attn.forward_fused(normed, cos, sin)
        pre, post = self.pre_feedforward_layernorm, self.post_attention_layernorm
        quantize = takes_fp8(self.mlp.gate_up_proj)
        normed, residual = fused.add_rms_norm(
            attn_out, residual, pre.weight, pre.eps, "gemma", post.weight, quantize
        )
        return self.mlp.forward_fused(normed), residual


# checkpoint projection -> (our fused parameter, its shard)
_QKV_SHARDS = {"q_proj": 0, "k_proj": 1, "v_proj": 2}
_GATE_UP_SHARDS = {"gate_proj": 0, "up_proj": 1}


class Gemma3TextModel(WdeModel):
    """Scaled embeddings + decoder layers + final norm; returns the last hidden state
    ``[num_tokens, hidden_size]``."""

    # A text model saved alone has no prefix; inside Gemma3ForCausalLM / the multimodal model it has one.
    weight_prefixes = ("model.language_model.", "language_model.model.", "model.")

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        hidden_size = config["hidden_size"]
        self.embed_tokens = nn.Embedding(config["vocab_size"], hidden_size)
        self.embed_scale = hidden_size**0.5  # applied in the model's dtype, as transformers does
        self.layer_types = types = layer_types(config)
        layers = [Gemma3DecoderLayer(config, layer_type) for layer_type in self.layer_types]
        self.layers = nn.ModuleList(layers)
        self.norm = Gemma3RMSNorm(hidden_size, config.get("rms_norm_eps", 1e-6))
        head_size = layers[0].self_attn.head_size
        self.qkv_sizes = layers[0].self_attn.qkv_sizes  # every layer's, to split the checkpoint's q/k/v
        # one RoPE per base (no parameters or buffers: a plain dict)
        self.rotary: dict[str, RotaryEmbedding] = {
            name: RotaryEmbedding(head_size, rope_theta(config, name)) for name in sorted(set(types))
        }

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        hidden_states = self.embed_tokens(input_ids)  # [num_tokens, hidden_size]
        hidden_states = hidden_states * torch.tensor(self.embed_scale, dtype=hidden_states.dtype)
        # cos, sin [num_tokens, 1, head_size] per layer type, shared by its layers
        dtype = hidden_states.dtype
        cos_sin = {name: rotary.cos_sin(positions, dtype) for name, rotary in self.rotary.items()}
        if fused.fused_kernels_enabled(hidden_states):
            return self._forward_fused(hidden_states, cos_sin)
        for layer, layer_type in zip(self.layers, self.layer_types, strict=True):
            cos, sin = cos_sin[layer_type]
            hidden_states = layer(hidden_states, cos, sin)
        return self.norm(hidden_states)

    def _forward_fused(
        self, hidden_states: torch.Tensor, cos_sin: dict[str, tuple[torch.Tensor, torch.Tensor]]
    ) -> torch.Tensor:
        """The layers with the fused kernels (CUDA): each layer's last post-norm and residual add done with
        the next norm."""
        residual = torch.zeros_like(hidden_states)  # [num_tokens, hidden_size]
        post_weight: torch.Tensor | None = None  # the previous layer's post-feed-forward norm
        layers = cast(list[Gemma3DecoderLayer], self.layers)
        for layer, layer_type in zip(layers, self.layer_types, strict=True):
            norm = layer.input_layernorm
            quantize = takes_fp8(layer.self_attn.qkv_proj)
            normed, residual = fused.add_rms_norm(
                hidden_states, residual, norm.weight, norm.eps, "gemma", post_weight, quantize
            )
            hidden_states, residual = layer.forward_fused(normed, residual, *cos_sin[layer_type])
            post_weight = layer.post_feedforward_layernorm.weight
        normed, _ = fused.add_rms_norm(
            hidden_states, residual, self.norm.weight, self.norm.eps, "gemma", post_weight
        )
        assert isinstance(normed, torch.Tensor)  # not asked to quantize: the 16-bit output
        return normed

    def compile_blocks(self) -> None:
        """torch.compile each layer's feed-forward block with dynamic token counts; attention stays eager."""
        compile_each(self.layers, "feed_forward")

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Copy HF-named tensors in (fusing q/k/v and gate/up); returns the parameter names loaded."""
        qkv_sizes = self.qkv_sizes
        intermediate_size = self.config["intermediate_size"]

        def target(name: str) -> WeightTarget | None:
            name = strip_prefix(name, self.weight_prefixes)
            parent, _, leaf = name.rpartition(".")  # "layers.0.self_attn.q_proj", "weight"
            module_path, _, projection = parent.rpartition(".")
            if projection in _QKV_SHARDS:
                return f"{module_path}.qkv_proj.{leaf}", fused_rows(_QKV_SHARDS[projection], qkv_sizes)
            if projection in _GATE_UP_SHARDS:
                rows = fused_rows(_GATE_UP_SHARDS[projection], (intermediate_size, intermediate_size))
                return f"{module_path}.gate_up_proj.{leaf}", rows
            return name, None  # lm_head.weight (tied to the embeddings) matches no parameter: skipped

        return load_weights_by_name(self, weights, target)
