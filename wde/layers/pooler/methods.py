"""Pooling over a flat batch: ``[num_tokens, hidden]`` + sequence boundaries -> ``[num_seqs, hidden]``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from wde.layers.host_copy import host_to_device


@dataclass
class PoolingMetadata:
    seq_lens: torch.Tensor  # [num_seqs] int64
    cu_seqlens: torch.Tensor  # [num_seqs + 1] int64
    seq_ids: torch.Tensor  # [num_tokens] int64: which sequence each token belongs to
    input_ids: torch.Tensor | None = None  # [num_tokens] int64: the token ids (heads that read them)

    @classmethod
    def from_seq_lens(
        cls, seq_lens: list[int], device: torch.device, input_ids: torch.Tensor | None = None
    ) -> PoolingMetadata:
        # built in numpy (torch's small CPU ops cost more in dispatch than in work), copied pinned
        lens = np.asarray(seq_lens, dtype=np.int64)
        cu_seqlens = np.zeros(len(seq_lens) + 1, dtype=np.int64)
        np.cumsum(lens, out=cu_seqlens[1:])
        seq_ids = np.repeat(np.arange(len(seq_lens), dtype=np.int64), lens)
        seq_lens_t, cu_seqlens_t, seq_ids_t = (host_to_device(a, device) for a in (lens, cu_seqlens, seq_ids))
        return cls(seq_lens_t, cu_seqlens_t, seq_ids_t, input_ids)


def cls_pool(hidden: torch.Tensor, meta: PoolingMetadata) -> torch.Tensor:
    return hidden.index_select(0, meta.cu_seqlens[:-1])


def last_pool(hidden: torch.Tensor, meta: PoolingMetadata) -> torch.Tensor:
    return hidden.index_select(0, meta.cu_seqlens[1:] - 1)


def mean_pool(hidden: torch.Tensor, meta: PoolingMetadata) -> torch.Tensor:
    sums = hidden.new_zeros(len(meta.seq_lens), hidden.shape[1]).index_add_(0, meta.seq_ids, hidden)
    return sums / meta.seq_lens.unsqueeze(1).to(hidden.dtype)


def max_pool(hidden: torch.Tensor, meta: PoolingMetadata) -> torch.Tensor:
    out = hidden.new_full((len(meta.seq_lens), hidden.shape[1]), float("-inf"))
    index = meta.seq_ids.unsqueeze(1).expand_as(hidden)
    return out.scatter_reduce_(0, index, hidden, reduce="amax", include_self=True)


POOLING_METHODS: dict[str, Callable[[torch.Tensor, PoolingMetadata], torch.Tensor]] = {
    "cls": cls_pool,
    "last": last_pool,
    "mean": mean_pool,
    "max": max_pool,
}


def select_sequences(
    hidden: torch.Tensor, meta: PoolingMetadata, rows: list[int]
) -> tuple[torch.Tensor, PoolingMetadata]:
    """The tokens and boundaries of the sequences ``rows`` only (a batch whose requests ask for different
    output kinds is pooled one kind at a time)."""
    cu_seqlens = meta.cu_seqlens.tolist()
    token_index = torch.cat([torch.arange(cu_seqlens[row], cu_seqlens[row + 1]) for row in rows])
    token_index = token_index.to(hidden.device)
    selected = hidden.index_select(0, token_index)  # [num_selected_tokens, hidden_size]
    seq_lens = [cu_seqlens[row + 1] - cu_seqlens[row] for row in rows]
    input_ids = meta.input_ids.index_select(0, token_index) if meta.input_ids is not None else None
    return selected, PoolingMetadata.from_seq_lens(seq_lens, hidden.device, input_ids)
