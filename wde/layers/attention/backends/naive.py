"""Per-sequence matmul-softmax in float32: slow, obviously correct; the test oracle. Honours every spec
(causal, sliding windows, grouped-query heads, additive position bias)."""

from __future__ import annotations

import torch

from wde.layers.attention.backend import AttentionBackend, AttentionMetadata, allowed_keys


class NaiveBackend(AttentionBackend):
    name = "naive"

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        metadata: AttentionMetadata,
        position_bias: torch.Tensor | None = None,  # [num_heads, max_seqlen, max_seqlen]
    ) -> torch.Tensor:
        key, value = self.expand_kv(key, value)
        output = torch.empty_like(query)
        start = 0
        for index, seq_len in enumerate(metadata.seq_lens):
            end = start + seq_len
            q = query[start:end].transpose(0, 1).float()  # [num_heads, seq_len, head_size]
            k = key[start:end].transpose(0, 1).float()
            v = value[start:end].transpose(0, 1).float()
            scores = torch.matmul(q, k.transpose(1, 2)) * self.scale  # [num_heads, seq_len, seq_len]
            if position_bias is not None:
                scores = scores + position_bias[:, :seq_len, :seq_len].float()
            allowed = allowed_keys(self.spec, seq_len, q.device)
            if allowed is not None:
                scores = scores.masked_fill(~allowed, float("-inf"))
            if metadata.num_keys is not None and metadata.num_keys[index] < seq_len:
                scores[..., metadata.num_keys[index] :] = float("-inf")  # tokens that are not keys
            probs = torch.softmax(scores, dim=-1)
            output[start:end] = torch.matmul(probs, v).transpose(0, 1).to(query.dtype)
            start = end
        return output
