"""The attention backend interface: bidirectional (or causal) attention over a flat, unpadded batch."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import torch


@dataclass
class AttentionMetadata:
    seq_lens: list[int]
    cu_seqlens: torch.Tensor  # [num_seqs + 1] int32, on the model's device
    max_seqlen: int

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens)

    @property
    def num_tokens(self) -> int:
        return int(sum(self.seq_lens))


class AttentionBackend(ABC):
    """``forward(q, k, v, metadata)`` on ``[num_tokens, num_heads, head_size]`` tensors."""

    name: ClassVar[str]
    # True when the backend pads sequences to the batch's longest; the scheduler then charges max_len x n.
    is_padded: ClassVar[bool] = False
    # True when forward() depends only on tensors (cu_seqlens) and max_seqlen, so a CUDA graph can be
    # captured once and replayed with new cu_seqlens contents.
    supports_cuda_graphs: ClassVar[bool] = False
    supported_devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    supported_dtypes: ClassVar[tuple[torch.dtype, ...]] = (torch.float32, torch.bfloat16, torch.float16)

    def __init__(self, num_heads: int, head_size: int, causal: bool = False) -> None:
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = head_size**-0.5
        self.causal = causal

    @classmethod
    def is_available(cls, device_type: str, dtype: torch.dtype, head_size: int) -> tuple[bool, str]:
        """(usable, why not). Subclasses add package / hardware checks."""
        if device_type not in cls.supported_devices:
            return False, f"does not run on {device_type} (only {', '.join(cls.supported_devices)})"
        if dtype not in cls.supported_dtypes:
            names = ", ".join(str(d).removeprefix("torch.") for d in cls.supported_dtypes)
            return False, f"does not support dtype {str(dtype).removeprefix('torch.')} (only {names})"
        return True, ""

    def build_metadata(self, seq_lens: list[int], device: torch.device) -> AttentionMetadata:
        """Once per batch (not per layer); subclasses add precomputed masks or indices."""
        cu_seqlens = torch.zeros(len(seq_lens) + 1, dtype=torch.int32)
        torch.cumsum(torch.tensor(seq_lens, dtype=torch.int32), dim=0, out=cu_seqlens[1:])
        return AttentionMetadata(seq_lens, cu_seqlens.to(device, non_blocking=True), max(seq_lens))

    @abstractmethod
    def forward(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, metadata: AttentionMetadata
    ) -> torch.Tensor:
        """[num_tokens, num_heads, head_size] x3 -> [num_tokens, num_heads, head_size]"""
