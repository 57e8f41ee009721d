"""LoRA task adapters chosen per token of a flat batch (Jina v3's ``lora_adaptations``).

A checkpoint with task adapters keeps its base weights unmerged and every task's LoRA stacked; each token runs
with its request's adapter (``TokenAdapters``: ``InputBatch.adapters``, read by the model from the forward
context). A linear adds ``scaling * (x @ A[t]^T) @ B[t]^T`` for its row's task ``t`` (an embedding
``scaling * A[t][ids] @ B[t]``) to the base layer's output:

- every row one task (the common case): one small matmul pair with that task's A and B;
- rows of several tasks: one matmul pair for all of them, ``x`` against every task's A at once
  (``[num_tokens, num_adapters * rank]``, a few dozen columns), zeroed outside each row's own task, then
  against every task's B: no per-task grouping, no host sync, the same kernels for any mix (CUDA graphs
  capture it), for ``num_adapters`` times the adapter's own few FLOPs;
- no row with a task: the base layer alone.

The LoRA layers sit beside the layer they adapt (``fc1`` and ``fc1_lora``), so quantization and weight
packing swap the base linear (``block_linears``) and leave the adapters alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from wde.config import NO_ADAPTER
from wde.layers.host_copy import host_to_device


@dataclass(frozen=True)
class TokenAdapters:
    """Which task adapter each token of a flat batch runs with (its index in ``TaskAdapters.names``, or
    ``NO_ADAPTER``): ``single`` when every token runs with the same one, else ``ids``."""

    single: int | None = None
    ids: torch.Tensor | None = None  # [num_tokens] int64, when the tokens' adapters differ

    @classmethod
    def of_sequences(
        cls, indices: list[int], seq_lens: list[int], padding_lens: list[int], device: torch.device
    ) -> TokenAdapters:
        """Per sequence its adapter index -> per token; the padding sequences after them (a row bucket) run
        with the one adapter of the batch, else with none."""
        first = indices[0] if indices else NO_ADAPTER
        if all(index == first for index in indices):
            return cls(single=first)
        per_seq = np.asarray(indices + [NO_ADAPTER] * len(padding_lens), dtype=np.int64)
        lens = np.asarray(seq_lens + padding_lens, dtype=np.int64)
        return cls(ids=host_to_device(np.repeat(per_seq, lens), device))


@dataclass(frozen=True)
class AdapterRows:
    """What every LoRA layer of one forward reads: the one adapter of every row, or a mask of each row's."""

    single: int | None = None
    mask: torch.Tensor | None = None  # [num_tokens, num_adapters, 1] in the model's dtype: 1 at the row's

    @classmethod
    def of(cls, tokens: TokenAdapters, num_adapters: int, dtype: torch.dtype) -> AdapterRows | None:
        """None where no row runs with an adapter (the model has none, or no request asked for one)."""
        if num_adapters == 0 or tokens.single == NO_ADAPTER:
            return None
        if tokens.single is not None:
            return cls(single=tokens.single)
        assert tokens.ids is not None  # one of the two is set
        tasks = torch.arange(num_adapters, device=tokens.ids.device)
        mask = tokens.ids.unsqueeze(1) == tasks  # [num_tokens, num_adapters]; NO_ADAPTER rows: all False
        return cls(mask=mask.unsqueeze(-1).to(dtype))


class LinearLora(nn.Module):
    """The task adapters of one ``nn.Linear`` (beside it, not around it): empty until ``set_adapters``."""

    def __init__(self) -> None:
        super().__init__()
        self.rank = 0
        self.a: torch.Tensor | None
        self.b: torch.Tensor | None
        self.register_buffer("a", None)  # [num_adapters * rank, fan_in]
        self.register_buffer("b", None)  # [fan_out, num_adapters * rank], scaled

    @torch.no_grad()
    def set_adapters(
        self, lora_a: torch.Tensor, lora_b: torch.Tensor, scaling: float, like: torch.Tensor
    ) -> None:
        """``lora_a`` [num_adapters, rank, fan_in], ``lora_b`` [num_adapters, fan_out, rank] (the remote
        code's layout), on the device and in the dtype of ``like`` (the base weight, [fan_out, fan_in])."""
        num_adapters, self.rank, fan_in = lora_a.shape
        fan_out = like.shape[0]
        if tuple(like.shape) != (fan_out, fan_in) or tuple(lora_b.shape) != (
            num_adapters,
            fan_out,
            self.rank,
        ):
            raise ValueError(
                f"LoRA A {tuple(lora_a.shape)} and B {tuple(lora_b.shape)} do not fit a linear of weight "
                f"{tuple(like.shape)} (A [tasks, rank, fan_in], B [tasks, fan_out, rank]); is the checkpoint "
                "complete?"
            )
        self.a = lora_a.reshape(num_adapters * self.rank, fan_in).to(like)
        b = (lora_b.float() * scaling).permute(1, 0, 2)  # [fan_out, num_adapters, rank]
        self.b = b.reshape(fan_out, num_adapters * self.rank).to(like)

    def add_to(self, out: torch.Tensor, x: torch.Tensor, rows: AdapterRows | None) -> torch.Tensor:
        """``out`` (the base linear of ``x`` [num_tokens, fan_in]) plus each row's adapter delta."""
        if rows is None or self.a is None or self.b is None:
            return out
        if rows.single is not None:
            cols = slice(rows.single * self.rank, (rows.single + 1) * self.rank)
            low = F.linear(x, self.a[cols])  # [num_tokens, rank]
            return torch.addmm(out, low, self.b[:, cols].t())  # [num_tokens, fan_out]
        assert rows.mask is not None
        num_adapters = self.a.shape[0] // self.rank
        low = F.linear(x, self.a).view(-1, num_adapters, self.rank) * rows.mask  # [num_tokens, tasks, rank]
        return torch.addmm(out, low.view(-1, num_adapters * self.rank), self.b.t())


class EmbeddingLora(nn.Module):
    """The task adapters of one ``nn.Embedding``: empty until ``set_adapters``."""

    def __init__(self) -> None:
        super().__init__()
        self.rank = 0
        self.a: torch.Tensor | None
        self.b: torch.Tensor | None
        self.register_buffer("a", None)  # [num_rows, num_adapters * rank]
        self.register_buffer("b", None)  # [num_adapters * rank, dim], scaled

    @torch.no_grad()
    def set_adapters(
        self, lora_a: torch.Tensor, lora_b: torch.Tensor, scaling: float, like: torch.Tensor
    ) -> None:
        """``lora_a`` [num_adapters, num_rows, rank], ``lora_b`` [num_adapters, rank, dim] (the remote code's
        layout), on the device and in the dtype of ``like`` (the base table, [num_rows, dim])."""
        num_adapters, num_rows, self.rank = lora_a.shape
        dim = like.shape[1]
        if tuple(like.shape) != (num_rows, dim) or tuple(lora_b.shape) != (num_adapters, self.rank, dim):
            raise ValueError(
                f"LoRA A {tuple(lora_a.shape)} and B {tuple(lora_b.shape)} do not fit an embedding of weight "
                f"{tuple(like.shape)} (A [tasks, rows, rank], B [tasks, rank, dim]); is the checkpoint "
                "complete?"
            )
        self.a = lora_a.permute(1, 0, 2).reshape(num_rows, num_adapters * self.rank).to(like)
        self.b = (lora_b.float() * scaling).reshape(num_adapters * self.rank, dim).to(like)

    def add_to(self, out: torch.Tensor, ids: torch.Tensor, rows: AdapterRows | None) -> torch.Tensor:
        """``out`` (the base embedding of ``ids`` [num_tokens]) plus each row's adapter delta."""
        if rows is None or self.a is None or self.b is None:
            return out
        low = F.embedding(ids, self.a)  # [num_tokens, num_adapters * rank]
        if rows.single is not None:
            cols = slice(rows.single * self.rank, (rows.single + 1) * self.rank)
            return torch.addmm(out, low[:, cols], self.b[cols])  # [num_tokens, dim]
        assert rows.mask is not None
        num_adapters = self.a.shape[1] // self.rank
        low = low.view(-1, num_adapters, self.rank) * rows.mask
        return torch.addmm(out, low.view(-1, num_adapters * self.rank), self.b)
