"""GTE encoder on flat, unpadded batches (Alibaba-NLP gte-base-en-v1.5, gte-large-en-v1.5,
gte-multilingual-base and -reranker-base).

Differs from BERT: no position table but RoPE on queries and keys (NTK-scaled in the published configs),
token-type embeddings only when ``type_vocab_size > 0``, and a gated MLP ``down(act(gate(x)) * up(x))`` whose
fused input projection has no bias. Blocks are post-norm as BERT's: attention -> residual -> LayerNorm ->
MLP -> residual -> LayerNorm; no final norm.

Two checkpoint layouts, one set of parameters (named as the published weights are):

- published, for remote code (``"architectures": ["NewModel"]`` / ``NewForSequenceClassification`` /
  ``NewForTokenClassification``, ``"model_type": "new"``, ``auto_map`` to Alibaba-NLP/new-impl): packed
  ``attention.qkv_proj``, ``mlp.up_gate_proj`` (up rows, then gate rows), ``attn_ln`` / ``mlp_ln``, heads
  behind a ``new.`` prefix; ``rope_theta`` + ``rope_scaling: {"type": "ntk", "factor": f[, "mixed_b": b]}``.
  wde never runs that code: it reads the config and names here.
- transformers' own (``GteModel``, ``"model_type": "gte"``): saved under the same names with a ``gte.``
  prefix (transformers reverses its conversion on save), or as its modules name them
  (``save_original_format=False``: ``layers.N.self_attn.q_proj``, ``mlp.gate_proj``,
  ``post_attention_layernorm``, ...); ``rope_parameters: {rope_type, rope_theta}``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from wde.config import num_labels
from wde.layers.activation import get_act_fn
from wde.layers.attention.layer import Attention
from wde.layers.attention.spec import AttentionSpec
from wde.layers.pooler.methods import PoolingMetadata, cls_pool
from wde.layers.quantization.int8_linear import compile_options
from wde.layers.rotary import rotary_self_attention
from wde.models.bert import BertPooler
from wde.models.block_compile import compile_each
from wde.models.interface import WdeModel
from wde.models.weight_names import WeightTarget, fused_rows, load_weights_by_name, strip_prefix

# the RoPE base when the config names none: the remote code's NewConfig default, and transformers' GteConfig
DEFAULT_ROPE_THETA = {"new": 10_000.0, "gte": 160_000.0}
WEIGHT_PREFIXES: tuple[str, ...] = ("new.", "gte.")  # the encoder inside a classifier checkpoint
# transformers' module names -> the published ones (then q/k/v and up/gate are fused below)
_RENAMES = (
    (re.compile(r"^layers\."), "encoder.layer."),
    (re.compile(r"\.self_attn\."), ".attention."),
    (re.compile(r"\.post_attention_layernorm\."), ".attn_ln."),
    (re.compile(r"\.post_mlp_layernorm\."), ".mlp_ln."),
)
_QKV = re.compile(r"^(encoder\.layer\.\d+\.attention)\.([qkv])_proj\.(weight|bias)$")
_UP_GATE = re.compile(r"^(encoder\.layer\.\d+\.mlp)\.(up|gate)_proj\.weight$")


# ---- config ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GteRope:
    """GTE's RoPE: a base, and the remote code's NTK scaling (``NTKScalingRotaryEmbedding``) when the
    factor is above 1 (fixed NTK, or mixed NTK with ``mixed_b``). The remote code scales from its first
    call whatever the length, as its cache is built past ``max_position_embeddings`` at load; a factor of at
    most 1 never scales within ``max_position_embeddings`` (the longest input wde allows)."""

    base: float
    ntk_factor: float = 1.0
    mixed_b: float | None = None

    def inv_freq(self, head_size: int, device: torch.device) -> torch.Tensor:
        """``[head_size / 2]`` float32 frequencies, computed as the remote code computes them."""
        exponents = torch.arange(0, head_size, 2, dtype=torch.float, device=device) / head_size
        if self.ntk_factor <= 1.0:
            return 1.0 / (self.base**exponents)
        if self.mixed_b is None:  # fixed NTK: a larger base, every frequency divided by factor^(2 / d)
            inv_freq = 1.0 / ((self.base * self.ntk_factor) ** exponents)
            return inv_freq / self.ntk_factor ** (2 / head_size)
        # mixed NTK: frequency m (1-based) divided by exp(a * m^b), a = log(factor) / (d / 2)^b
        a = math.log(self.ntk_factor) / (head_size / 2) ** self.mixed_b  # on the host: graph-capture safe
        m = torch.arange(1, head_size // 2 + 1, dtype=torch.float, device=device)
        return 1.0 / (self.base**exponents) / (a * m**self.mixed_b).exp()


def read_rope(config: dict[str, Any]) -> GteRope:
    """The RoPE of either config spelling: ``rope_parameters`` (transformers v5), else the remote code's
    ``rope_theta`` + ``rope_scaling``; an "ntk" type (from ``rope_scaling``, or carried into
    ``rope_parameters`` by transformers' conversion of a published config) scales as the remote code does."""
    params = config.get("rope_parameters") or {}
    scaling = config.get("rope_scaling") or {}
    rope_type = params.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
    default_theta = DEFAULT_ROPE_THETA["new" if config.get("model_type") == "new" else "gte"]
    base = float(params.get("rope_theta") or config.get("rope_theta") or default_theta)
    if rope_type == "default":
        return GteRope(base)
    if rope_type == "ntk":
        source = params if "factor" in params else scaling
        if "factor" not in source:
            raise ValueError("config.json names RoPE type 'ntk' without a factor; add rope_scaling.factor")
        mixed_b = source.get("mixed_b")
        return GteRope(base, float(source["factor"]), None if mixed_b is None else float(mixed_b))
    raise ValueError(
        f"GTE RoPE type {rope_type!r} (rope_parameters / rope_scaling in config.json) is not supported; wde "
        "implements plain RoPE and the published checkpoints' 'ntk' scaling"
    )


def unsupported_settings(config: dict[str, Any]) -> list[str]:
    """The remote code's switches wde does not implement, as set in ``config`` (none in the published
    checkpoints)."""
    found = []
    if config.get("position_embedding_type", "rope") not in ("rope", "rotary"):
        found.append(f"position_embedding_type {config['position_embedding_type']!r} (only 'rope')")
    if config.get("layer_norm_type", "layer_norm") != "layer_norm":
        found.append(f"layer_norm_type {config['layer_norm_type']!r} (only 'layer_norm')")
    if config.get("logn_attention_scale", False):
        found.append("logn_attention_scale true (per-length query scaling)")
    return found


def refuse_settings(family: str, found: list[str]) -> None:
    """Raises one line naming every setting ``found`` in ``config.json`` (none: returns)."""
    if found:
        raise ValueError(
            f"{family} config.json sets {'; '.join(found)}, which wde does not implement; serve the model "
            "with its remote code in transformers"
        )


def check_config(config: dict[str, Any]) -> None:
    """Raises one line naming every setting of ``config.json`` wde cannot serve a GTE model with."""
    refuse_settings("GTE", unsupported_settings(config))
    read_rope(config)  # raises for a RoPE type it cannot compute


# ---- layers ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BlockBiases:
    """Which of a block's linears have a bias (GTE's by default; NomicBERT's configs name theirs)."""

    qkv: bool = True
    output: bool = True
    up_gate: bool = False
    down: bool = True


class GteRotaryEmbedding(nn.Module):
    """cos / sin of a flat batch's positions (restarting at 0 per sequence); no buffers (models are built on
    the meta device), the frequencies are recomputed per forward."""

    def __init__(self, head_size: int, rope: GteRope) -> None:
        super().__init__()
        self.head_size = head_size
        self.rope = rope

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``positions`` [num_tokens] -> cos, sin [num_tokens, 1, head_size], in float32 then ``dtype``."""
        inv_freq = self.rope.inv_freq(self.head_size, positions.device)  # [head_size / 2]
        freqs = positions.float().unsqueeze(1) * inv_freq  # [num_tokens, head_size / 2]
        angles = torch.cat((freqs, freqs), dim=-1).unsqueeze(1)  # [num_tokens, 1, head_size]
        return angles.cos().to(dtype), angles.sin().to(dtype)


class GteEmbeddings(nn.Module):
    """Word (+ token type when ``type_vocab_size > 0``) embeddings -> LayerNorm; positions enter as RoPE."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        hidden_size = config["hidden_size"]
        self.word_embeddings = nn.Embedding(config["vocab_size"], hidden_size)
        num_types = int(config.get("type_vocab_size", 1))
        self.token_type_embeddings = nn.Embedding(num_types, hidden_size) if num_types > 0 else None
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=config.get("layer_norm_eps", 1e-12))

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None) -> torch.Tensor:
        embeddings = self.word_embeddings(input_ids)  # [num_tokens, hidden_size]
        if self.token_type_embeddings is not None:
            if token_type_ids is None:  # every token of segment 0
                embeddings = embeddings + self.token_type_embeddings.weight[0]
            else:
                embeddings = embeddings + self.token_type_embeddings(token_type_ids)
        return self.LayerNorm(embeddings)


class GteAttention(nn.Module):
    def __init__(self, config: dict[str, Any], biases: BlockBiases) -> None:
        super().__init__()
        hidden_size = config["hidden_size"]
        self.num_heads = config["num_attention_heads"]
        if hidden_size % self.num_heads and not config.get("head_dim"):
            raise ValueError(
                f"hidden_size ({hidden_size}) must be a multiple of num_attention_heads ({self.num_heads})"
            )
        self.head_size = config.get("head_dim") or hidden_size // self.num_heads  # GTE has no head_dim
        attn_size = self.num_heads * self.head_size
        self.qkv_proj = nn.Linear(hidden_size, 3 * attn_size, bias=biases.qkv)  # packed query/key/value
        self.o_proj = nn.Linear(attn_size, hidden_size, bias=biases.output)
        self.attn = Attention(AttentionSpec(num_heads=self.num_heads, head_size=self.head_size))

    def forward(self, hidden_states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        qkv = self.qkv_proj(hidden_states)  # [num_tokens, 3 * num_heads * head_size]
        attn_out = rotary_self_attention(qkv, self.num_heads, self.head_size, cos, sin, self.attn)
        return self.o_proj(attn_out)  # [num_tokens, hidden_size]


class GteMLP(nn.Module):
    """Gated: ``down(act(gate) * up)`` where ``up, gate = up_gate_proj(x).split(intermediate_size)``."""

    def __init__(self, config: dict[str, Any], biases: BlockBiases) -> None:
        super().__init__()
        hidden_size, self.intermediate_size = config["hidden_size"], config["intermediate_size"]
        self.up_gate_proj = nn.Linear(hidden_size, 2 * self.intermediate_size, bias=biases.up_gate)
        self.act = get_act_fn(config.get("hidden_act", "gelu"))
        self.down_proj = nn.Linear(self.intermediate_size, hidden_size, bias=biases.down)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        up_gate = self.up_gate_proj(hidden_states)  # [num_tokens, 2 * intermediate_size]
        up, gate = up_gate.split(self.intermediate_size, dim=-1)  # [num_tokens, intermediate_size] x2
        return self.down_proj(self.act(gate) * up)  # [num_tokens, hidden_size]


class GteLayer(nn.Module):
    """Post-norm block: ``h = attn_ln(h + attn(h)); h = mlp_ln(h + mlp(h))``."""

    mlp_cls: ClassVar[type[nn.Module]] = GteMLP  # built as mlp_cls(config, biases) (Jina v3: a plain MLP)
    attention_cls: ClassVar[type[GteAttention]] = GteAttention  # (Jina v3: with its LoRA task adapters)

    def __init__(self, config: dict[str, Any], biases: BlockBiases) -> None:
        super().__init__()
        eps = config.get("layer_norm_eps", 1e-12)
        self.attention = self.attention_cls(config, biases)
        self.attn_ln = nn.LayerNorm(config["hidden_size"], eps=eps)
        self.mlp = self.mlp_cls(config, biases)
        self.mlp_ln = nn.LayerNorm(config["hidden_size"], eps=eps)

    def forward(self, hidden_states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        hidden_states = self.attn_ln(hidden_states + self.attention(hidden_states, cos, sin))
        return self.mlp_block(hidden_states)

    def mlp_block(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """gated MLP -> residual add -> LayerNorm (token-wise: what torch.compile fuses)."""
        return self.mlp_ln(hidden_states + self.mlp(hidden_states))


class GteEncoder(nn.Module):
    def __init__(
        self, config: dict[str, Any], biases: BlockBiases, layer_cls: type[GteLayer] = GteLayer
    ) -> None:
        super().__init__()
        layers = [layer_cls(config, biases) for _ in range(config["num_hidden_layers"])]
        self.head_size = layers[0].attention.head_size
        self.layer = nn.ModuleList(layers)


# ---- models ------------------------------------------------------------------------------------------------
class GteModel(WdeModel):
    """Embeddings + layers; returns the last hidden state ``[num_tokens, hidden_size]`` (pooled as the
    sentence-transformers config says; without one CLS + normalize, as GTE's)."""

    weight_prefixes = WEIGHT_PREFIXES
    layer_cls: ClassVar[type[GteLayer]] = GteLayer  # the block (Jina v3's: a plain MLP)
    embeddings_cls: ClassVar[type[GteEmbeddings]] = GteEmbeddings  # (Jina v3's: with LoRA task adapters)

    def __init__(self, config: dict[str, Any], add_pooler: bool = False) -> None:
        super().__init__(config)
        self.check_config(config)
        self.embeddings = self.embeddings_cls(config)
        self.encoder = GteEncoder(config, self.block_biases(config), self.layer_cls)
        self.pooler = BertPooler(config["hidden_size"]) if add_pooler else None
        self.rotary_emb = self.make_rotary(config, self.encoder.head_size)

    # ---- what a family built on these blocks (NomicBERT) overrides ----
    def check_config(self, config: dict[str, Any]) -> None:
        check_config(config)

    def block_biases(self, config: dict[str, Any]) -> BlockBiases:
        return BlockBiases()

    def make_rotary(self, config: dict[str, Any], head_size: int) -> GteRotaryEmbedding:
        return GteRotaryEmbedding(head_size, read_rope(config))

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        hidden_states = self.embeddings(input_ids, token_type_ids)  # [num_tokens, hidden_size]
        # cos, sin [num_tokens, 1, head_size]: once per forward, shared by every layer
        cos, sin = self.rotary_emb.cos_sin(positions, hidden_states.dtype)
        for layer in self.encoder.layer:
            hidden_states = layer(hidden_states, cos, sin)
        return hidden_states

    def compile_blocks(self) -> None:
        """torch.compile each layer's MLP block with dynamic token counts; attention stays eager."""
        compile_each(self.encoder.layer, "mlp_block", compile_options)

    def weight_target(self, name: str) -> WeightTarget:
        """A checkpoint name of either layout (prefix stripped) -> our parameter and its rows."""
        name = strip_prefix(name, self.weight_prefixes)
        for pattern, replacement in _RENAMES:
            name = pattern.sub(replacement, name)
        match = _QKV.match(name)
        if match:  # transformers' separate q / k / v projections
            attn_size = self.config["num_attention_heads"] * self.encoder.head_size
            rows = fused_rows("qkv".index(match[2]), (attn_size,) * 3)
            return f"{match[1]}.qkv_proj.{match[3]}", rows
        match = _UP_GATE.match(name)
        if match:  # transformers' separate up / gate projections: up rows first, as the published packing
            size = self.config["intermediate_size"]
            return f"{match[1]}.up_gate_proj.weight", fused_rows(("up", "gate").index(match[2]), (size, size))
        return name, None

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        # a NewForTokenClassification checkpoint's token-weight head (classifier.*) is not ours: skipped
        return load_weights_by_name(self, weights, self.weight_target)


class GteForSequenceClassification(WdeModel):
    """Cross-encoder: GTE + pooler (dense, tanh on the first token) + classifier -> ``[num_seqs, num_labels]``
    (``GteForSequenceClassification`` / the published ``NewForSequenceClassification``)."""

    encoder_cls: ClassVar[type[GteModel]] = GteModel  # the encoder inside (NomicBERT's classifier: its own)

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.gte = self.encoder_cls(config, add_pooler=True)
        self.classifier = nn.Linear(config["hidden_size"], num_labels(config))

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.gte(input_ids, positions, token_type_ids)

    def compute_logits(self, hidden_states: torch.Tensor, meta: PoolingMetadata) -> torch.Tensor:
        first_token_states = cls_pool(hidden_states, meta)  # [num_seqs, hidden_size]
        assert self.gte.pooler is not None  # built with add_pooler=True
        return self.classifier(self.gte.pooler(first_token_states))  # [num_seqs, num_labels]

    def compile_blocks(self) -> None:
        self.gte.compile_blocks()

    def weight_target(self, name: str) -> WeightTarget:
        if name.startswith("classifier."):
            return name, None
        encoder_name, rows = self.gte.weight_target(name)  # "gte." / "new." stripped
        return f"gte.{encoder_name}", rows

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        return load_weights_by_name(self, weights, self.weight_target)
