"""PyTorch scaled_dot_product_attention. Only the attention op sees padding: the flat batch is scattered into
``[num_seqs, num_heads, max_len, head_size]`` with a key-padding mask, and gathered back after."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from wde.layers.attention.backend import AttentionBackend, AttentionMetadata


@dataclass
class SdpaMetadata(AttentionMetadata):
    # Row of each flat token in the padded [num_seqs * max_len] layout; None when no padding is needed.
    pad_index: torch.Tensor | None = None
    # [num_seqs, 1, 1 or max_len, max_len] bool, True where attention is allowed; None when unmasked.
    attn_mask: torch.Tensor | None = None


class TorchSdpaBackend(AttentionBackend):
    name = "torch_sdpa"
    is_padded = True

    def build_metadata(self, seq_lens: list[int], device: torch.device) -> SdpaMetadata:
        base = super().build_metadata(seq_lens, device)
        metadata = SdpaMetadata(base.seq_lens, base.cu_seqlens, base.max_seqlen)
        if min(seq_lens) == metadata.max_seqlen:
            return metadata  # equal lengths: a plain view, no copies, no mask
        max_len = metadata.max_seqlen
        lens = torch.tensor(seq_lens)
        seq_starts = torch.arange(len(seq_lens)) * max_len
        seq_offsets = torch.cumsum(lens, 0) - lens  # first flat row of each sequence
        offsets = torch.arange(metadata.num_tokens) - torch.repeat_interleave(seq_offsets, lens)
        pad_index = torch.repeat_interleave(seq_starts, lens) + offsets
        key_valid = torch.arange(max_len)[None, :] < lens[:, None]  # [num_seqs, max_len]
        mask = key_valid[:, None, None, :]  # [num_seqs, 1, 1, max_len]
        if self.causal:
            mask = mask & torch.ones(max_len, max_len, dtype=torch.bool).tril()[None, None]
        metadata.pad_index = pad_index.to(device, non_blocking=True)
        metadata.attn_mask = mask.to(device, non_blocking=True)
        return metadata

    def forward(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, metadata: SdpaMetadata
    ) -> torch.Tensor:
        num_heads, head_size = query.shape[1:]
        num_seqs, max_len = metadata.num_seqs, metadata.max_seqlen
        q, k, v = (
            self._to_padded(t, metadata) for t in (query, key, value)
        )  # [num_seqs, heads, max_len, hs]
        is_causal = self.causal and metadata.attn_mask is None
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=metadata.attn_mask, is_causal=is_causal)
        out = out.transpose(1, 2).reshape(num_seqs * max_len, num_heads, head_size)
        if metadata.pad_index is None:
            return out
        return out.index_select(0, metadata.pad_index)  # [num_tokens, num_heads, head_size]

    @staticmethod
    def _to_padded(flat: torch.Tensor, metadata: SdpaMetadata) -> torch.Tensor:
        num_heads, head_size = flat.shape[1:]
        num_seqs, max_len = metadata.num_seqs, metadata.max_seqlen
        if metadata.pad_index is None:
            padded = flat
        else:
            padded = flat.new_zeros(num_seqs * max_len, num_heads, head_size)
            padded.index_copy_(0, metadata.pad_index, flat)
        return padded.view(num_seqs, max_len, num_heads, head_size).transpose(1, 2)
