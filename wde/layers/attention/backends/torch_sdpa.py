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

On a CPU with AVX-512F, float32 layers with a plain spec (bidirectional, no window, no position bias, every
token a key) skip the groups: ``varlen_cpu``'s kernel attends each sequence in place on the flat batch (no
padding, no gather / scatter copies; 2-4x faster than grouped SDPA at head size 32).
``WDE_VARLEN_ATTENTION=0`` turns it off; the groups are then built on first use.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from wde.layers.attention.backend import AttentionBackend, AttentionMetadata, allowed_keys
from wde.layers.attention.backends import varlen_kernel as varlen_cpu
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
            return pattern[None, None]
        mask = self.valid[:, None, None, :]  # [num_seqs, 1, 1, max_len]: padded keys hidden
        return mask if pattern is None else mask & pattern[None, None]


@dataclass
class SdpaMetadata(AttentionMetadata):
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    # the varlen CPU kernel's inputs ([num_seqs + 1] int64 sequence starts, work order); None: not usable
    seq_starts: torch.Tensor | None = None
    work_order: torch.Tensor | None = None
    _groups: list[SdpaGroup] | None = None
    _scatter_index: torch.Tensor | None = None

    @property
    def groups(self) -> list[SdpaGroup]:
        if self._groups is None:
            self._build_groups()
        return self._groups

    @property
    def scatter_index(self) -> torch.Tensor:
        """[num_tokens]: row of each flat token in the concatenation of the groups' padded outputs"""
        if self._scatter_index is None:
            self._build_groups()
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


def varlen_enabled() -> bool:
    """The varlen CPU kernel may run (not switched off by WDE_VARLEN_ATTENTION=0, and built for this CPU)."""
    return os.environ.get("WDE_VARLEN_ATTENTION", "1") != "0" and varlen_cpu.available()


class TorchSdpaBackend(AttentionBackend):
    name = "torch_sdpa"

    @classmethod
    def build_metadata(
        cls, seq_lens: list[int], device: torch.device, num_keys: list[int] | None = None
    ) -> SdpaMetadata:
        base = AttentionBackend.build_metadata(seq_lens, device, num_keys)
        metadata = SdpaMetadata(base.seq_lens, base.cu_seqlens, base.max_seqlen, num_keys, device)
        if device.type == "cpu" and num_keys is None and varlen_enabled():
            metadata.seq_starts = base.cu_seqlens.to(torch.int64)
            metadata.work_order = varlen_cpu.work_order(seq_lens)
        return metadata

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        metadata: SdpaMetadata,
        position_bias: torch.Tensor | None = None,  # [num_heads, max_seqlen, max_seqlen]
    ) -> torch.Tensor:
        if (
            metadata.seq_starts is not None
            and position_bias is None
            and self.spec.is_plain
            and varlen_cpu.supports(query, key, value)
        ):
            return varlen_cpu.varlen_attention(
                query, key, value, metadata.seq_starts, metadata.work_order, self.scale
            )
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
