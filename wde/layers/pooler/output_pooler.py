"""The embed task's pooler: each request names an output kind (``PoolingParams.output``: "dense",
"sparse"; the model's first when unset) and its rows go to that kind's head. A batch of one kind (the
usual case) goes to its head whole; a mixed batch is split by kind first."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Protocol

import torch

from wde.inputs import PoolingParams
from wde.layers.pooler.methods import PoolingMetadata, select_sequences


class OutputHead(Protocol):
    def __call__(
        self, hidden: torch.Tensor, meta: PoolingMetadata, params: list[PoolingParams]
    ) -> list[Any]: ...


class OutputPooler:
    def __init__(self, heads: dict[str, OutputHead], default: str) -> None:
        self.heads = heads
        self.default = default

    def __call__(
        self,
        hidden: torch.Tensor,  # [num_tokens, hidden_size]
        meta: PoolingMetadata,
        params: list[PoolingParams],
    ) -> list[Any]:
        rows_by_kind: dict[str, list[int]] = defaultdict(list)
        for row, p in enumerate(params):
            rows_by_kind[p.output or self.default].append(row)
        if len(rows_by_kind) == 1:
            return self._head(next(iter(rows_by_kind)))(hidden, meta, params)
        outputs: list[Any] = [None] * len(params)
        for kind, rows in rows_by_kind.items():
            selected, selected_meta = select_sequences(hidden, meta, rows)
            results = self._head(kind)(selected, selected_meta, [params[row] for row in rows])
            for row, result in zip(rows, results, strict=True):
                outputs[row] = result
        return outputs

    def _head(self, kind: str) -> OutputHead:
        if kind not in self.heads:
            raise ValueError(f"this model serves {', '.join(self.heads)} output, not {kind!r}")
        return self.heads[kind]
