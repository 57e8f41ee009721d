"""Embedding pooler: pool (CLS / mean / max / last), the model's sentence-transformers Dense modules if it
has any, then per request: Matryoshka truncation and normalization."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch
import torch.nn.functional as F

from wde.config import ModelConfig, PoolingConfig
from wde.inputs import PoolingParams
from wde.layers.pooler.dense_head import DenseStack
from wde.layers.pooler.methods import POOLING_METHODS, PoolingMetadata


class EmbeddingPooler:
    def __init__(self, config: PoolingConfig, dense: DenseStack | None = None) -> None:
        self.pool = POOLING_METHODS[config.method]
        self.dense = dense
        self.default_normalize = config.normalize

    def __call__(
        self,
        hidden: torch.Tensor,  # [num_tokens, hidden_size]
        meta: PoolingMetadata,
        params: list[PoolingParams],
    ) -> list[np.ndarray]:
        pooled = self.pool(hidden.float(), meta)  # [num_seqs, hidden_size], float32
        if self.dense is not None:  # in the model's dtype, as sentence-transformers runs it
            pooled = self.dense(pooled.to(self.dense.dtype)).float()  # [num_seqs, embedding_size]
        # Rows asking for the same (dimensions, normalize) are handled together.
        groups: dict[tuple[int | None, bool], list[int]] = defaultdict(list)
        for row, p in enumerate(params):
            groups[(p.dimensions, self.default_normalize if p.normalize is None else p.normalize)].append(row)
        if len(groups) == 1:
            (dims, norm), _ = next(iter(groups.items()))
            return list(self._finish(pooled, dims, norm).cpu().numpy())
        outputs: list[np.ndarray] = [None] * len(params)  # type: ignore[list-item]
        for (dims, norm), rows in groups.items():
            index = torch.tensor(rows, device=pooled.device)
            finished = self._finish(pooled.index_select(0, index), dims, norm).cpu().numpy()
            for row, vector in zip(rows, finished, strict=True):
                outputs[row] = vector
        return outputs

    @staticmethod
    def _finish(pooled: torch.Tensor, dims: int | None, normalize: bool) -> torch.Tensor:
        if dims is not None:
            pooled = pooled[:, :dims]  # Matryoshka: truncate, then (re)normalize
        if normalize:
            pooled = F.normalize(pooled, p=2, dim=-1)
        return pooled.contiguous()


def build_dense_head(
    model: torch.nn.Module, model_config: ModelConfig, device: torch.device, dtype: torch.dtype
) -> EmbeddingPooler:
    """The dense output's head: pooling method (cls / mean / max / last) -> sentence-transformers Dense
    stack -> Matryoshka and normalization per request."""
    dense_layers = model_config.dense_layers
    dense = DenseStack.load(dense_layers, device, dtype) if dense_layers else None
    return EmbeddingPooler(model_config.pooling, dense)
