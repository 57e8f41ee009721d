"""The embed task's pooler: each request names its output kinds (``PoolingParams.output``: "dense",
"sparse", "multi_vector", or several of them at once; the model's first when unset) and its rows go to
those kinds' heads, over the one forward pass. A batch of one kind (the usual case) goes to its head whole;
a mixed batch is split by kinds first. A request asking for several kinds gets ``{kind: result}``."""

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
        rows_by_kinds: dict[tuple[str, ...], list[int]] = defaultdict(list)
        for row, p in enumerate(params):
            rows_by_kinds[p.kinds(self.default)].append(row)
        if len(rows_by_kinds) == 1:
            return self._run(next(iter(rows_by_kinds)), hidden, meta, params)
        outputs: list[Any] = [None] * len(params)
        for kinds, rows in rows_by_kinds.items():
            selected, selected_meta = select_sequences(hidden, meta, rows)
            results = self._run(kinds, selected, selected_meta, [params[row] for row in rows])
            for row, result in zip(rows, results, strict=True):
                outputs[row] = result
        return outputs

    def _run(
        self, kinds: tuple[str, ...], hidden: torch.Tensor, meta: PoolingMetadata, params: list[PoolingParams]
    ) -> list[Any]:
        if len(kinds) == 1:
            return self._head(kinds[0])(hidden, meta, params)
        per_kind = {kind: self._head(kind)(hidden, meta, params) for kind in kinds}
        return [{kind: per_kind[kind][row] for kind in kinds} for row in range(len(params))]

    def _head(self, kind: str) -> OutputHead:
        if kind not in self.heads:
            raise ValueError(f"this model serves {', '.join(self.heads)} output, not {kind!r}")
        return self.heads[kind]
