"""The attention backend interface: attention over a flat, unpadded batch, one instance per layer.

A backend class builds the batch's metadata once (``build_metadata``: sequence boundaries, groups, masks
it can share); each attention layer holds an instance made from its ``AttentionSpec`` (heads, kv heads,
head size, scale, causal, sliding window) and runs ``forward`` on ``[num_tokens, heads, head_size]``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np
import torch

from wde.layers.attention.spec import AttentionSpec
from wde.layers.host_copy import host_to_device


@dataclass
class AttentionMetadata:
    seq_lens: list[int]
    cu_seqlens: torch.Tensor  # [num_seqs + 1] int32, on the model's device
    max_seqlen: int
    # per sequence, how many of its first tokens are keys (the rest attend but are not attended to: a
    # ColBERT query's expansion tokens); None: every token is a key
    num_keys: list[int] | None = None

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens)

    @property
    def num_tokens(self) -> int:
        return int(sum(self.seq_lens))


class AttentionBackend(ABC):
    """``forward(q, k, v, metadata)``: q ``[num_tokens, num_heads, head_size]``, k and v
    ``[num_tokens, num_kv_heads, head_size]`` -> ``[num_tokens, num_heads, head_size]``."""

    name: ClassVar[str]
    # True when the backend pads sequences to the batch's longest; the scheduler then charges max_len x n.
    is_padded: ClassVar[bool] = False
    # True when forward() depends only on tensors (cu_seqlens) and max_seqlen, so a CUDA graph can be
    # captured once and replayed with new cu_seqlens contents.
    supports_cuda_graphs: ClassVar[bool] = False
    # True when forward() honours ``metadata.num_keys`` (tokens that are not attended to)
    supports_key_limits: ClassVar[bool] = True
    supported_devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    supported_dtypes: ClassVar[tuple[torch.dtype, ...]] = (torch.float32, torch.bfloat16, torch.float16)

    def __init__(self, spec: AttentionSpec) -> None:
        self.spec = spec
        self.num_heads = spec.num_heads
        self.num_kv_heads = spec.num_kv_heads
        self.head_size = spec.head_size
        self.scale = spec.scale
        self.causal = spec.causal

    @classmethod
    def is_available(cls, device_type: str, dtype: torch.dtype) -> tuple[bool, str]:
        """(usable here, why not). Subclasses add package / hardware checks."""
        if device_type not in cls.supported_devices:
            return False, f"does not run on {device_type} (only {', '.join(cls.supported_devices)})"
        if dtype not in cls.supported_dtypes:
            names = ", ".join(str(d).removeprefix("torch.") for d in cls.supported_dtypes)
            return False, f"does not support dtype {str(dtype).removeprefix('torch.')} (only {names})"
        return True, ""

    @classmethod
    def supports(cls, spec: AttentionSpec) -> tuple[bool, str]:
        """(can compute this layer's attention, why not). The base honours every spec."""
        return True, ""

    @classmethod
    def build_metadata(
        cls, seq_lens: list[int], device: torch.device, num_keys: list[int] | None = None
    ) -> AttentionMetadata:
        """Once per batch (not per layer); subclasses add what their layers share (groups, indices)."""
        if num_keys is not None and not cls.supports_key_limits:
            raise ValueError(
                f"the {cls.name} attention backend attends to every token; inputs with unattended tokens "
                "(ColBERT query expansion with attend=False) need --attention-backend torch_sdpa or naive"
            )
        # built in numpy: torch's small CPU ops cost more in dispatch than in work
        cu_seqlens = np.zeros(len(seq_lens) + 1, dtype=np.int32)
        np.cumsum(seq_lens, out=cu_seqlens[1:])
        return AttentionMetadata(seq_lens, host_to_device(cu_seqlens, device), max(seq_lens), num_keys)

    @abstractmethod
    def forward(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, metadata: AttentionMetadata
    ) -> torch.Tensor:
        """[num_tokens, num_heads | num_kv_heads, head_size] x3 -> [num_tokens, num_heads, head_size]"""

    def expand_kv(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Grouped-query k / v repeated to one per query head (for kernels without native GQA)."""
        if self.num_kv_heads == self.num_heads:
            return key, value
        repeats = self.spec.num_queries_per_kv
        return key.repeat_interleave(repeats, dim=1), value.repeat_interleave(repeats, dim=1)


class PositionBiasForward(Protocol):
    """``forward`` of a backend whose ``supports`` accepts position-bias specs (naive, torch_sdpa,
    varlen_cpu): the bias ``[num_heads, max_seqlen, max_seqlen]`` comes as a keyword."""

    def __call__(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        metadata: AttentionMetadata,
        position_bias: torch.Tensor | None = None,
    ) -> torch.Tensor: ...


def allowed_keys(spec: AttentionSpec, seq_len: int, device: torch.device) -> torch.Tensor | None:
    """[seq_len, seq_len] bool: may query i attend to key j, by the spec's causal flag and window; None when
    every key is allowed."""
    if spec.is_plain:
        return None
    position = torch.arange(seq_len, device=device)
    distance = position[:, None] - position[None, :]  # query - key: > 0 for keys before the query
    allowed = torch.ones(seq_len, seq_len, dtype=torch.bool, device=device)
    if spec.causal:
        allowed &= distance >= 0
    if spec.sliding_window is not None:
        left, right = spec.sliding_window
        allowed &= (distance <= left) & (-distance <= right)
    return allowed
