"""``AttentionSpec``: what one attention layer computes, decided by the model that owns the layer.

Backends read it (and say through ``AttentionBackend.supports`` when they cannot honour it); the runner and
the engine know nothing model-specific.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class AttentionSpec:
    num_heads: int
    head_size: int  # from the config (head_dim) where it has one, never assumed to be hidden / heads
    num_kv_heads: int = 0  # grouped-query attention: 0 means num_heads (plain multi-head)
    scale: float = field(default=0.0)  # 0.0 means head_size ** -0.5
    causal: bool = False
    # (left, right): a query attends to keys at most `left` positions before and `right` after it
    # (flash-attn's window_size); None: the whole sequence. A causal layer has right = 0.
    sliding_window: tuple[int, int] | None = None
    # True: each call adds a per-head bias to the scores, ``[num_heads, max_seqlen, max_seqlen]`` over
    # (query, key) positions within a sequence, the same for every sequence (MPNet's relative position bias).
    # Backends without an additive-bias input refuse such a layer in ``supports``.
    position_bias: bool = False
    # True: the layer's scores and weighted values may be multiplied in bfloat16 (float32 sums), where a
    # backend has such a kernel and the CPU multiplies bf16 natively: set on the layers of an int8 model,
    # whose GEMMs round their inputs coarser than that (wde/layers/quantization/quantize.py)
    bf16_products: bool = False

    def __post_init__(self) -> None:
        if self.num_kv_heads == 0:
            object.__setattr__(self, "num_kv_heads", self.num_heads)
        if self.scale == 0.0:
            object.__setattr__(self, "scale", self.head_size**-0.5)
        if self.num_heads % self.num_kv_heads != 0:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})"
            )
        if self.sliding_window is not None and min(self.sliding_window) < 0:
            raise ValueError(f"sliding_window {self.sliding_window} must be two distances >= 0")

    @property
    def num_queries_per_kv(self) -> int:
        return self.num_heads // self.num_kv_heads

    @property
    def is_plain(self) -> bool:
        """Every query sees every key of its sequence (no causal or window mask)."""
        return not self.causal and self.sliding_window is None

    def describe(self) -> str:
        parts = [f"{self.num_heads} heads of {self.head_size}"]
        if self.num_kv_heads != self.num_heads:
            parts.append(f"{self.num_kv_heads} kv heads")
        if self.causal:
            parts.append("causal")
        if self.sliding_window is not None:
            parts.append(f"window {self.sliding_window}")
        if self.position_bias:
            parts.append("position bias")
        if self.bf16_products:
            parts.append("bf16 products allowed")
        return ", ".join(parts)
