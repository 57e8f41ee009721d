"""BGE-M3's sparse (lexical) head: one weight per token, ``relu(linear(hidden))`` (``sparse_linear.pt``:
``[1, hidden_size]`` + bias); a text's vector keeps, per token id it contains, the largest weight of that id,
drops the special tokens (<s>, </s>, <pad>, <unk>) and zeros, as FlagEmbedding's ``BGEM3FlagModel`` does.
Per request, the ``max_active_dims`` largest weights may be kept only.

Unlike SPLADE there is no ``[num_tokens, vocab_size]`` tensor: the weights stay per token and are reduced
by (sequence, token id) key.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from wde.config import SparseConfig
from wde.inputs import PoolingParams
from wde.layers.pooler.methods import PoolingMetadata
from wde.outputs import SparseVector


def load_token_weight_linear(
    path: str, hidden_size: int, device: torch.device, dtype: torch.dtype
) -> nn.Linear:
    """The ``[hidden_size] -> 1`` linear of a ``sparse_linear.pt`` state dict (``weight``, ``bias``)."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    weight = state.get("weight")
    if weight is None or tuple(weight.shape) != (1, hidden_size) or set(state) - {"weight", "bias"}:
        shapes = {name: tuple(tensor.shape) for name, tensor in state.items()}
        raise ValueError(
            f"{Path(path).name} holds {shapes}; a sparse_linear.pt has weight [1, {hidden_size}] and "
            "bias [1] for this model's hidden size"
        )
    linear = nn.Linear(hidden_size, 1, bias="bias" in state)
    linear.load_state_dict(state)
    return linear.to(device=device, dtype=dtype).eval()


class TokenWeightPooler:
    def __init__(self, linear: nn.Linear, config: SparseConfig) -> None:
        self.linear = linear
        self.config = config
        self.skip_token_ids = torch.tensor(sorted(config.skip_token_ids), dtype=torch.int64)

    def __call__(
        self,
        hidden: torch.Tensor,  # [num_tokens, hidden_size], the model's dtype
        meta: PoolingMetadata,
        params: list[PoolingParams],
    ) -> list[SparseVector]:
        if meta.input_ids is None:
            raise ValueError(
                "the token-weight sparse head needs the batch's token ids in its pooling metadata"
            )
        weights = torch.relu(self.linear(hidden)).squeeze(-1).float()  # [num_tokens]
        token_ids = meta.input_ids  # [num_tokens]
        # 1. the tokens that count: a positive weight, not a special token
        keep = weights > 0
        if self.skip_token_ids.numel():
            keep &= ~torch.isin(token_ids, self.skip_token_ids.to(token_ids.device))
        # 2. the largest weight per (sequence, token id): one key each, sorted (sequence-major, then id)
        stride = int(token_ids.max()) + 1 if token_ids.numel() else 1
        keys = meta.seq_ids[keep] * stride + token_ids[keep]  # [num_kept]
        unique_keys, inverse = torch.unique(keys, return_inverse=True)  # [num_pairs]
        values = torch.zeros(unique_keys.shape[0], dtype=torch.float32, device=weights.device)
        values.scatter_reduce_(0, inverse, weights[keep], reduce="amax", include_self=False)
        rows, ids = unique_keys // stride, unique_keys % stride
        # 3. per text, its pairs in ascending id order (the largest max_active_dims when asked)
        counts = torch.bincount(rows, minlength=len(params)).tolist()
        ids_np, values_np = ids.cpu().numpy(), values.cpu().numpy()
        vectors, start = [], 0
        for p, count in zip(params, counts, strict=True):
            row_ids, row_values = ids_np[start : start + count], values_np[start : start + count]
            start += count
            k = p.max_active_dims if p.max_active_dims is not None else self.config.max_active_dims
            if k is not None and k < count:
                top = np.sort(np.argsort(-row_values, kind="stable")[:k])
                row_ids, row_values = row_ids[top], row_values[top]
            vectors.append(SparseVector(row_ids, row_values))
        return vectors
