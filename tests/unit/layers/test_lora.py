"""LoRA task adapters per row (``wde/layers/lora.py``): every path equals the weights merged as the remote
code's ``LoRAParametrization`` merges them (``W + scaling * B @ A``, an embedding's ``A @ B``), row by row."""

from __future__ import annotations

import torch
from torch import nn

from wde.config import NO_ADAPTER
from wde.layers.lora import AdapterRows, EmbeddingLora, LinearLora, TokenAdapters

NUM_TASKS, RANK, SCALING = 3, 2, 0.5
ROW_TASKS = [0, 2, NO_ADAPTER, 1, 0, 2]  # one flat batch's rows
ATOL = 1e-5


def rows_of(row_tasks: list[int]) -> AdapterRows | None:
    if len(set(row_tasks)) == 1:
        return AdapterRows.of(TokenAdapters(single=row_tasks[0]), NUM_TASKS, torch.float32)
    return AdapterRows.of(TokenAdapters(ids=torch.tensor(row_tasks)), NUM_TASKS, torch.float32)


def test_token_adapters_per_sequence() -> None:
    cpu = torch.device("cpu")
    assert TokenAdapters.of_sequences([2, 2], [3, 1], [4], cpu) == TokenAdapters(single=2)  # padding too
    assert TokenAdapters.of_sequences([], [], [4], cpu) == TokenAdapters(single=NO_ADAPTER)
    mixed = TokenAdapters.of_sequences([1, NO_ADAPTER, 0], [2, 1, 3], [2], cpu)
    assert mixed.single is None and mixed.ids is not None
    assert mixed.ids.tolist() == [1, 1, NO_ADAPTER, 0, 0, 0, NO_ADAPTER, NO_ADAPTER]
    assert AdapterRows.of(TokenAdapters(single=NO_ADAPTER), NUM_TASKS, torch.float32) is None
    assert AdapterRows.of(TokenAdapters(single=1), 0, torch.float32) is None  # a model without adapters


def test_linear_lora_equals_the_merged_weights_per_row() -> None:
    generator = torch.Generator().manual_seed(0)
    base = nn.Linear(6, 5)
    lora_a = torch.randn(NUM_TASKS, RANK, 6, generator=generator)
    lora_b = torch.randn(NUM_TASKS, 5, RANK, generator=generator)
    lora = LinearLora()
    lora.set_adapters(lora_a, lora_b, SCALING, base.weight)
    x = torch.randn(len(ROW_TASKS), 6, generator=generator)  # [num_tokens, fan_in]

    def merged(x: torch.Tensor, task: int) -> torch.Tensor:
        delta = 0 if task == NO_ADAPTER else SCALING * lora_b[task] @ lora_a[task]
        return nn.functional.linear(x, base.weight + delta, base.bias)

    with torch.no_grad():
        expected = torch.stack([merged(row, task) for row, task in zip(x, ROW_TASKS, strict=True)])
        assert torch.allclose(lora.add_to(base(x), x, rows_of(ROW_TASKS)), expected, atol=ATOL)
        for task in (*range(NUM_TASKS), NO_ADAPTER):
            got = lora.add_to(base(x), x, rows_of([task] * len(ROW_TASKS)))
            assert torch.allclose(got, merged(x, task), atol=ATOL), task
        assert torch.equal(LinearLora().add_to(base(x), x, rows_of(ROW_TASKS)), base(x))  # no adapters


def test_embedding_lora_equals_the_merged_table_per_row() -> None:
    generator = torch.Generator().manual_seed(1)
    base = nn.Embedding(7, 4)
    lora_a = torch.randn(NUM_TASKS, 7, RANK, generator=generator)
    lora_b = torch.randn(NUM_TASKS, RANK, 4, generator=generator)
    lora = EmbeddingLora()
    lora.set_adapters(lora_a, lora_b, SCALING, base.weight)
    ids = torch.tensor([3, 0, 6, 3, 1, 5])

    def merged(token: torch.Tensor, task: int) -> torch.Tensor:
        delta = 0 if task == NO_ADAPTER else SCALING * lora_a[task] @ lora_b[task]
        return (base.weight + delta)[token]

    with torch.no_grad():
        expected = torch.stack([merged(token, task) for token, task in zip(ids, ROW_TASKS, strict=True)])
        assert torch.allclose(lora.add_to(base(ids), ids, rows_of(ROW_TASKS)), expected, atol=ATOL)
        for task in range(NUM_TASKS):
            got = lora.add_to(base(ids), ids, rows_of([task] * len(ROW_TASKS)))
            assert torch.allclose(got, merged(ids, task), atol=ATOL), task
