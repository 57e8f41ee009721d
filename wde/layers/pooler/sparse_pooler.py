"""SPLADE sparse head, as sentence-transformers' ``SpladePooling`` computes it: the model's masked-LM logits
per token, ``log(1 + relu(logits))`` (``log1p_relu``: log1p once more), pooled over each text's tokens by
max (or sum), then per request the ``max_active_dims`` largest weights kept; each text's non-zero weights
come back as a ``SparseVector`` (ascending token ids).

The ``[num_tokens, vocab_size]`` logits are the large tensor here (2,048 tokens x 30,522 ids is 250 MB in
float32): they are made and pooled a chunk of tokens at a time, never whole.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import cast

import torch

from wde.config import ModelConfig, SparseConfig
from wde.inputs import PoolingParams
from wde.layers.pooler.methods import PoolingMetadata
from wde.layers.pooler.token_weight_pooler import TokenWeightPooler, load_token_weight_linear
from wde.outputs import SparseVector

# Elements of one chunk of logits (float32: 64 MiB); the chunk's token count follows from the vocabulary.
CHUNK_ELEMENTS = 2**24


# the model's masked-LM head: [num_tokens, hidden_size] -> [num_tokens, vocab_size]
MaskedLMLogits = Callable[[torch.Tensor], torch.Tensor]


class SparsePooler:
    def __init__(self, mlm_logits: MaskedLMLogits, config: SparseConfig, vocab_size: int) -> None:
        self.mlm_logits = mlm_logits
        self.config = config
        self.vocab_size = vocab_size
        self.chunk_tokens = max(1, CHUNK_ELEMENTS // vocab_size)

    def __call__(
        self,
        hidden: torch.Tensor,  # [num_tokens, hidden_size], the model's dtype
        meta: PoolingMetadata,
        params: list[PoolingParams],
    ) -> list[SparseVector]:
        weights = self.pool(hidden, meta)  # [num_seqs, vocab_size] float32, >= 0
        weights = self.prune(weights, params)
        return self.to_vectors(weights)

    def pool(self, hidden: torch.Tensor, meta: PoolingMetadata) -> torch.Tensor:
        """Each text's vocabulary weights ``[num_seqs, vocab_size]``: SPLADE's transform of the logits,
        max (or sum) over its tokens. Weights are >= 0, so zeros are the identity of both reductions."""
        num_tokens = hidden.shape[0]
        pooled = torch.zeros(len(meta.seq_lens), self.vocab_size, dtype=torch.float32, device=hidden.device)
        cu_seqlens = meta.cu_seqlens.tolist()
        seq = 0
        for start in range(0, num_tokens, self.chunk_tokens):
            end = min(start + self.chunk_tokens, num_tokens)
            chunk = self._activate(self.mlm_logits(hidden[start:end]).float())  # [chunk, vocab]
            # the sequences this chunk holds tokens of: reduce each one's slice into its row
            while seq < len(cu_seqlens) - 1 and cu_seqlens[seq] < end:
                lo, hi = max(cu_seqlens[seq], start), min(cu_seqlens[seq + 1], end)
                if hi > lo:
                    self._reduce_into(pooled[seq], chunk[lo - start : hi - start])
                if cu_seqlens[seq + 1] > end:
                    break  # continues in the next chunk
                seq += 1
        return pooled

    def _activate(self, logits: torch.Tensor) -> torch.Tensor:
        weights = logits.relu_().log1p_()
        if self.config.activation == "log1p_relu":
            weights = weights.log1p_()
        return weights

    def _reduce_into(self, row: torch.Tensor, tokens: torch.Tensor) -> None:
        # row: [vocab_size]; tokens: [n, vocab_size]
        if self.config.pooling == "max":
            torch.maximum(row, tokens.amax(dim=0), out=row)
        else:
            row.add_(tokens.sum(dim=0))

    def prune(self, weights: torch.Tensor, params: list[PoolingParams]) -> torch.Tensor:
        """Keep each text's ``max_active_dims`` largest weights (the request's, else the model's), as
        sentence-transformers' ``select_max_active_dims`` does; rows without a limit keep all."""
        groups: dict[int, list[int]] = defaultdict(list)
        for row, p in enumerate(params):
            k = p.max_active_dims if p.max_active_dims is not None else self.config.max_active_dims
            if k is not None and k < self.vocab_size:
                groups[k].append(row)
        for k, rows in groups.items():
            index = torch.tensor(rows, device=weights.device)
            values, top = torch.topk(weights.index_select(0, index), k, dim=1)  # [len(rows), k]
            kept = torch.zeros(len(rows), self.vocab_size, dtype=weights.dtype, device=weights.device)
            weights.index_copy_(0, index, kept.scatter_(1, top, values))
        return weights

    @staticmethod
    def to_vectors(weights: torch.Tensor) -> list[SparseVector]:
        """Per row, the non-zero (token id, weight) pairs in ascending token-id order."""
        nonzero = weights.nonzero()  # [num_active, 2] (row, token id), row-major order
        values = weights[nonzero[:, 0], nonzero[:, 1]].cpu().numpy()
        counts = torch.bincount(nonzero[:, 0], minlength=weights.shape[0]).tolist()
        token_ids = nonzero[:, 1].cpu().numpy()
        vectors, start = [], 0
        for count in counts:
            vectors.append(SparseVector(token_ids[start : start + count], values[start : start + count]))
            start += count
        return vectors


def build_sparse_head(
    model: torch.nn.Module, model_config: ModelConfig, device: torch.device, dtype: torch.dtype
) -> SparsePooler | TokenWeightPooler:
    """The sparse output's head: SPLADE over the model's masked-LM logits, or BGE-M3's per-token weights."""
    config = model_config.sparse
    if config is None:
        raise ValueError(f"{model_config.model} has no sparse output configured")
    if config.method == "token_weights":
        assert config.weights_path is not None  # SparseConfig.verify
        linear = load_token_weight_linear(config.weights_path, model_config.hidden_size, device, dtype)
        return TokenWeightPooler(linear, config)
    # model: a WdeModel, whose contract (wde/models/interface.py) the layers read without importing it
    if not model.has_mlm_head:
        raise ValueError(
            f"{type(model).__name__} has no masked-LM head, which SPLADE pooling needs; serve a "
            "*ForMaskedLM checkpoint (BertForMaskedLM, DistilBertForMaskedLM)"
        )
    mlm_logits = cast(MaskedLMLogits, model.compute_mlm_logits)
    return SparsePooler(mlm_logits, config, model_config.vocab_size)
