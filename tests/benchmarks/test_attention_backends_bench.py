"""benchmarks.attention_backends: the scheduler-like batching of the per-layer timing."""

from __future__ import annotations

from benchmarks.attention_backends import batches_of


def test_batches_keep_arrival_order_within_the_token_budget() -> None:
    assert batches_of([5, 5, 5, 12, 1], 10) == [[5, 5], [5], [12], [1]]  # a longer text than the budget alone
    assert batches_of([3], 2048) == [[3]]
