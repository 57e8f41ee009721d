"""The multi-vector (late-interaction) head: one vector per token. The final hidden states are projected
(a sentence-transformers ``Dense`` on token embeddings, or BGE-M3's ``colbert_linear.pt``), L2-normalized,
and the tokens that are not scored are left out: the first one for BGE-M3 (its [CLS]), and skiplist tokens
(MultiVectorMask's ``skiplist_words``) of documents (and of queries when configured).
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F

from wde.config import ModelConfig, MultiVectorConfig
from wde.inputs import PoolingParams
from wde.layers.pooler.dense_head import DenseStack
from wde.layers.pooler.methods import PoolingMetadata
from wde.outputs import TokenVectors


class MultiVectorPooler:
    def __init__(self, config: MultiVectorConfig, projection: DenseStack | None) -> None:
        self.config = config
        self.projection = projection
        self.skiplist_ids = torch.tensor(sorted(config.skiplist_ids), dtype=torch.int64)

    def __call__(
        self,
        hidden: torch.Tensor,  # [num_tokens, hidden_size], the model's dtype
        meta: PoolingMetadata,
        params: list[PoolingParams],
    ) -> list[TokenVectors]:
        vectors = hidden if self.projection is None else self.projection(hidden.to(self.projection.dtype))
        vectors = vectors.float()  # [num_tokens, vector_size]
        if self.config.normalize:
            vectors = F.normalize(vectors, p=2, dim=-1)
        keep = self._scored_tokens(meta, params)  # [num_tokens] bool
        vectors_np, keep_np = vectors.cpu().numpy(), keep.cpu().numpy()
        cu_seqlens = meta.cu_seqlens.tolist()
        return [
            TokenVectors(vectors_np[start:end][keep_np[start:end]])
            for start, end in itertools.pairwise(cu_seqlens)
        ]

    def _scored_tokens(self, meta: PoolingMetadata, params: list[PoolingParams]) -> torch.Tensor:
        keep = torch.ones(meta.seq_ids.shape[0], dtype=torch.bool, device=meta.seq_ids.device)
        if self.config.skip_first:
            keep[meta.cu_seqlens[:-1]] = False
        if self.skiplist_ids.numel():
            if meta.input_ids is None:
                raise ValueError("the multi-vector skiplist needs the batch's token ids (pooling metadata)")
            skipped_rows = torch.tensor(
                [self.config.skiplist_queries or p.input_type != "query" for p in params], device=keep.device
            )
            in_skiplist = torch.isin(meta.input_ids, self.skiplist_ids.to(keep.device))
            keep &= ~(in_skiplist & skipped_rows[meta.seq_ids])
        return keep


def build_multi_vector_head(
    model: torch.nn.Module, model_config: ModelConfig, device: torch.device, dtype: torch.dtype
) -> MultiVectorPooler:
    """The multi_vector output's head: the per-token projection (if any) loaded onto the model's device."""
    config = model_config.multi_vector
    if config is None:
        raise ValueError(f"{model_config.model} has no multi-vector output configured")
    projection = (
        DenseStack.load([config.projection], device, dtype) if config.projection is not None else None
    )
    return MultiVectorPooler(config, projection)
