"""PyTorch scaled_dot_product_attention on length groups.

The flat batch's sequences are sorted by length and cut into groups whose lengths are within
``MAX_GROUP_PADDING`` of each other; each group runs as one padded SDPA call (unmasked when its lengths
are equal). Only the attention op sees padding, and at most ~25% of it: one padded call over the whole
batch wastes far more on mixed lengths, and one call per sequence pays per-call overhead for short ones.
The groups and gather indices are built once per batch and reused by every layer; each group's mask for
a layer's spec (padding, causal, sliding window) is built on first use and shared by the layers with the
same spec. Grouped-query k / v are repeated to one per query head. A layer's additive position bias
(``[num_heads, max_seqlen, max_seqlen]``) is cut to each group's length and joins the padding mask as a
float mask.

On CPUs with AVX2 or AVX-512F the ``varlen_cpu`` backend comes first for the layers it honours (float32,
plain specs); this one runs everything else. The groups are built on first use.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from wde.layers.attention.backend import AttentionBackend, AttentionMetadata, allowed_keys
from wde.layers.attention.spec import AttentionSpec

# A group's longest sequence is at most this factor (or MIN_GROUP_SLACK tokens) longer than its shortest.
MAX_GROUP_PADDING = 1.25
MIN_GROUP_SLACK = 8


@dataclass
class SdpaGroup:
    num_seqs: int
    max_len: int
    gather_index: torch.Tensor  # [num_seqs * max_len]: flat row for each padded slot (pads repeat a real row)
    valid: torch.Tensor | None  # [num_seqs, max_len] bool, True on keys (real tokens); None: all are
    masks: dict[tuple[bool, tuple[int, int] | None], torch.Tensor | None] = field(default_factory=dict)

    def mask_for(self, spec: AttentionSpec) -> torch.Tensor | None:
        """[num_seqs, 1, 1 or max_len, max_len] bool (True: may attend), or None: no mask needed (equal
        lengths and a plain spec; a causal spec then runs with is_causal)."""
        key = (spec.causal, spec.sliding_window)
        if key not in self.masks:
            self.masks[key] = self._build_mask(spec)
        return self.masks[key]

    def _build_mask(self, spec: AttentionSpec) -> torch.Tensor | None:
        causal_only = spec.causal and spec.sliding_window is None
        if self.valid is None and (spec.is_plain or causal_only):
            return None  # equal lengths: no padding to hide; SDPA's is_causal does the rest
        pattern = allowed_keys(spec, self.max_len, self.gather_index.device)  # [max_len, max_len] or None
        if self.valid is None:
            assert pattern is not None  # a window: neither plain nor causal only
            return pattern[None, None]
        mask = self.valid[:, None, None, :]  # [num_seqs, 1, 1, max_len]: padded keys hidden
        return mask if pattern is None else mask & pattern[None, None]


@dataclass
class SdpaMetadata(AttentionMetadata):
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    _groups: list[SdpaGroup] | None = None
    _scatter_index: torch.Tensor | None = None

    @property
    def groups(self) -> list[SdpaGroup]:
        if self._groups is None:
            self._build_groups()
        assert self._groups is not None
        return self._groups

    @property
    def scatter_index(self) -> torch.Tensor:
        """[num_tokens]: row of each flat token in the concatenation of the groups' padded outputs"""
        if self._scatter_index is None:
            self._build_groups()
        assert self._scatter_index is not None
        return self._scatter_index

    def _build_groups(self) -> None:
        seq_lens, num_keys, device = self.seq_lens, self.num_keys, self.device
        seq_starts = [0]
        for seq_len in seq_lens:
            seq_starts.append(seq_starts[-1] + seq_len)
        scatter_index = torch.empty(self.num_tokens, dtype=torch.int64)
        num_padded_rows = 0
        groups = []
        for members in group_by_length(seq_lens):
            lens = torch.tensor([seq_lens[i] for i in members])
            max_len = int(lens.max())
            slot = torch.arange(max_len)
            # padded slots past a sequence's end repeat its first row: masked as keys, dropped as queries
            starts = torch.tensor([seq_starts[i] for i in members])
            valid = slot[None, :] < lens[:, None]  # [num_seqs, max_len]
            gather_index = torch.where(valid, starts[:, None] + slot[None, :], starts[:, None])
            rows = num_padded_rows + torch.arange(len(members) * max_len).view(len(members), max_len)
            scatter_index[gather_index[valid]] = rows[valid]
            num_padded_rows += len(members) * max_len
            keys = valid  # the slots attended to: real tokens, the first num_keys of each when limited
            if num_keys is not None:
                keys = slot[None, :] < torch.tensor([num_keys[i] for i in members])[:, None]
            groups.append(
                SdpaGroup(
                    len(members),
                    max_len,
                    gather_index.view(-1).to(device, non_blocking=True),
                    None if bool(keys.all()) else keys.to(device, non_blocking=True),
                )
            )
        self._groups, self._scatter_index = groups, scatter_index.to(device, non_blocking=True)


def group_by_length(seq_lens: list[int]) -> list[list[int]]:
    """Sequence indices, sorted by length and cut where padding would exceed the allowance."""
    order = sorted(range(len(seq_lens)), key=seq_lens.__getitem__)
    groups: list[list[int]] = []
    for index in order:
        if groups:
            shortest = seq_lens[groups[-1][0]]
            if seq_lens[index] <= max(shortest * MAX_GROUP_PADDING, shortest + MIN_GROUP_SLACK):
                groups[-1].append(index)
                continue
        groups.append([index])
    return groups


def with_bias(mask: torch.Tensor | None, bias: torch.Tensor) -> torch.Tensor:
    """A float SDPA mask: ``bias`` [num_heads, max_len, max_len] where ``mask`` (bool, broadcast to
    [num_seqs, 1, 1 or max_len, max_len]) allows, -inf where it does not."""
    if mask is None:
        return bias[None]  # [1, num_heads, max_len, max_len]
    return bias[None].masked_fill(~mask, float("-inf"))  # [num_seqs, num_heads, max_len, max_len]


class TorchSdpaBackend(AttentionBackend):
    name = "torch_sdpa"

    @classmethod
    def build_metadata(
        cls, seq_lens: list[int], device: torch.device, num_keys: list[int] | None = None
    ) -> SdpaMetadata:
        base = AttentionBackend.build_metadata(seq_lens, device, num_keys)
        return SdpaMetadata(base.seq_lens, base.cu_seqlens, base.max_seqlen, num_keys, device)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        metadata: AttentionMetadata,
        position_bias: torch.Tensor | None = None,  # [num_heads, max_seqlen, max_seqlen]
    ) -> torch.Tensor:
        assert isinstance(metadata, SdpaMetadata), "metadata from TorchSdpaBackend.build_metadata"
        key, value = self.expand_kv(key, value)
        num_heads, head_size = query.shape[1:]
        outputs = []
        for group in metadata.groups:
            attn_mask = group.mask_for(self.spec)
            if position_bias is not None:
                attn_mask = with_bias(attn_mask, position_bias[:, : group.max_len, : group.max_len])
            q, k, v = (
                t.index_select(0, group.gather_index)
                .view(group.num_seqs, group.max_len, num_heads, head_size)
                .transpose(1, 2)
                for t in (query, key, value)
            )  # [num_seqs, num_heads, max_len, head_size]
            out = F.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=attn_mask,
                is_causal=self.causal and attn_mask is None,
                scale=self.scale,
            )
            outputs.append(out.transpose(1, 2).reshape(-1, num_heads, head_size))
        padded = outputs[0] if len(outputs) == 1 else torch.cat(outputs)
        return padded.index_select(0, metadata.scatter_index)  # [num_tokens, num_heads, head_size]
